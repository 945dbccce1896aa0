"""How long a benchmark's measurements last at least, from its flags alone, before anything runs: the rounds of
``loader`` and ``data`` and the steps of ``e2e``, each against the hour a benchmark may take (a problem is returned
as (flag, value, fix) for :mod:`tutorial_lib.bench.arguments` to refuse)."""

from __future__ import annotations

# e2e's images/s at most, by device: ~15x the H200's measured ResNet-50 rate (6,646/s) and ~90x this project's
# fastest CPU loader (115/s at 224 px); no JPEG pipeline of one machine reaches them, so the time they give is a
# lower bound of the real run's
E2E_MAX_IMAGES_PER_SEC = {"cpu": 10_000, "cuda": 100_000}
E2E_MAX_SECONDS = 3600  # a benchmark, not a training run: over an hour, train with the trainer instead


def rounds_duration_problem(values: dict) -> tuple[str, object, str] | None:
    """``loader``, ``data``: each measurement lasts at least ``--min-time`` and ``--batches`` batches, in every round
    and for every setting; refused where that lower bound alone is over the hour a benchmark may take (r43u: each
    flag within its limit, their product 2,000 h, silent)."""
    command = values.get("command")
    if command not in ("loader", "data"):
        return None
    rounds, settings = values.get("repeats") or 1, settings_measured(values)
    seconds = (values.get("min_time") or 0) * rounds * settings
    images = (values.get("batches") or 0) * (values.get("batch_size") or 1) * rounds * settings
    lower = max(seconds, images / E2E_MAX_IMAGES_PER_SEC["cuda"])
    if lower > E2E_MAX_SECONDS:
        flag = "min_time" if seconds >= images / E2E_MAX_IMAGES_PER_SEC["cuda"] else "batches"
        return (flag, values[flag], f"a measurement short enough that all {rounds:,} rounds of {settings} "
                f"setting(s) fit in {E2E_MAX_SECONDS // 3600} h (this one: at least {lower / 3600:,.1f} h); or fewer "
                "--repeats")
    return None


def settings_measured(values: dict) -> int:
    """How many settings ``loader`` or ``data`` measures in each round: ``loader`` each worker count twice (two
    forms); ``data`` each worker count (the device's default list where --workers is left out), and the GPU input
    pipeline where it runs (r43v: a default 3-count list was counted as 1)."""
    if values.get("command") == "loader":
        return len(values.get("workers") or [1]) * 2
    from tutorial_lib.bench.compute import defaults, resolve_device

    device = resolve_device(values.get("device") or "auto")
    pipeline = values.get("gpu_pipeline")
    gpu_pipeline = pipeline == "yes" or (pipeline == "auto" and device.type == "cuda")
    return len(values.get("workers") or defaults(device)["workers"]) + gpu_pipeline


def duration_problem(values: dict) -> tuple[str, object, str] | None:
    """``e2e``: the timed steps (with the warm-up, the synthetic reference and every setting measured) at the
    fastest rate any machine reaches (:data:`E2E_MAX_IMAGES_PER_SEC`) would still take over an hour: refused with
    that lower bound, before the data set is made. Only a lower bound can be known before a step has run (the real
    rate depends on the model, the JPEGs and the workers); the count cap alone let ``--steps 20000000`` run on."""
    if values.get("command") != "e2e" or not isinstance(values.get("steps"), int):
        return None
    from tutorial_lib.bench.compute import defaults, resolve_device

    kind = resolve_device(values.get("device") or "auto").type
    d = defaults(kind)
    warmup = d["warmup"] if values.get("warmup") is None else values["warmup"]
    settings = len(values.get("workers") or [1]) * len(values.get("input_pipeline") or [1])
    runs = (1 if values.get("no_reference") else 2) * settings
    images = (values["steps"] + warmup) * (values.get("batch_size") or d["batch_size"]) * runs
    rate = E2E_MAX_IMAGES_PER_SEC["cuda" if kind == "cuda" else "cpu"]
    if images > E2E_MAX_SECONDS * rate:  # whole numbers: images / rate overflows a float past 309 digits (r43v)
        flag = "warmup" if warmup > values["steps"] else "steps"  # r43t: a huge warm-up was blamed on --steps
        return (flag, values[flag] if flag in values and values[flag] is not None else warmup,
                f"fewer {'warm-up ' if flag == 'warmup' else ''}steps, e.g. {5 if flag == 'warmup' else 50}: "
                f"{count_text(images)} images in all would take at least {count_text(images // rate // 3600)} h "
                f"even at {rate:,} images/s (faster than any {kind} machine), over the {E2E_MAX_SECONDS // 3600} h a "
                "benchmark may take (train longer with python -m tutorial_lib.train)")
    return None


def count_text(number: int) -> str:
    """A whole number for a message: with thousands separators, or past 10**15 its power of ten (r43v: a 30-digit
    --warmup made a 300-character number of hours)."""
    from tutorial_lib.numbers import magnitude

    return f"{number:,}" if number < 10**15 else magnitude(number)
