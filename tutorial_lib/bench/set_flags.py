"""The data sets ``python -m tutorial_lib.bench`` commands would generate, checked from their flags before anything is
made: their file count, and the disk and the hour their generation takes; and the one form of bench's refusals.
Kept apart from :mod:`tutorial_lib.bench.arguments`, which checks every other flag."""

from __future__ import annotations

from tutorial_lib.bench.durations import count_text
from tutorial_lib.engine.config import ConfigError, shorten

MAX_FILES = 2_000_000  # a generated set's files, at most: more than ImageNet's 1.33 million training images


def refuse(flag: str, value, fix: str) -> None:
    """Raise ConfigError ``"--<flag>: <value> is refused. Fix: <fix>."``, the one form of bench's refusals."""
    raise ConfigError(f"--{flag.replace('_', '-')}: {shorten(value)} is refused. Fix: {fix}.")


def check_set_size(values: dict) -> None:
    """The files a generated set would have (classes x images per class, with the defaults of the flags left
    out: at most ImageNet's 1,000 classes and 1,300 images each; shards' ``--jpeg-images``), refused above
    :data:`MAX_FILES` with the estimate, before anything is made."""
    jpeg_images = values.get("jpeg_images")  # shards' jpeg set (r43m: 99,999,999,999 ran out of memory, unnamed)
    if isinstance(jpeg_images, int) and jpeg_images > MAX_FILES:
        refuse("jpeg_images", jpeg_images, f"a set of at most {MAX_FILES:,} JPEGs")
    per_class = [values.get(name) for name in ("per_class", "train_per_class", "val_per_class")]
    given = [n for n in per_class if isinstance(n, int)]
    if not given and values.get("command") in ("data", "e2e") and isinstance(values.get("classes"), int):
        from tutorial_lib.bench.compute import defaults  # their --per-class is the device's (r43v: --classes alone
        given = [defaults(values.get("device") or "auto")["per_class"]]  # was never bounded, and made folders on)
    if not given:
        return
    classes = values.get("classes") if isinstance(values.get("classes"), int) else 1000
    files = classes * sum(given)
    if files > MAX_FILES:
        counted = [name for name in ("per_class", "train_per_class", "val_per_class")
                   if isinstance(values.get(name), int)]
        flag = "classes" if classes > 1000 or not counted else max(counted, key=values.get)
        refuse(flag, classes if flag == "classes" else values[flag], f"a set of at most {MAX_FILES:,} files "
                f"(this one: {count_text(classes)} classes x {count_text(sum(given))} images = "
                f"{count_text(files)}); pass smaller --classes or --per-class")


def check_source_fits(values: dict) -> None:
    """``prepare``'s and ``extract``'s generated sources (prepare: one per form) against the disk and the hour
    (:func:`tutorial_lib.bench.fake_imagenet.check_set_fits`), naming the largest count (r43ab: ``--val-per-class
    400000`` began 800,000 JPEGs, some 2 h of work)."""
    if values.get("command") not in ("prepare", "extract"):
        return
    counts = {name: values.get(name) for name in ("classes", "per_class", "val_per_class")}
    if not all(isinstance(count, int) for count in counts.values()):
        return
    import tempfile

    from tutorial_lib.bench.fake_forms import FORMS
    from tutorial_lib.bench.fake_imagenet import check_set_fits
    from tutorial_lib.bench.prepare import PREPARE_IMAGE_SIZE

    prepare = values["command"] == "prepare"
    sources = len(FORMS) if prepare else 1
    flag = max(counts, key=counts.get)
    check_set_fits(values.get("work_dir") or tempfile.gettempdir(),
                   sources * counts["classes"] * (counts["per_class"] + counts["val_per_class"]),
                   PREPARE_IMAGE_SIZE if prepare else tuple(values.get("jpeg_size") or (500, 375)),
                   f"--{flag.replace('_', '-')}", "smaller --classes, --per-class or --val-per-class (e.g. "
                   "--classes 20 --per-class 250 --val-per-class 25)")
