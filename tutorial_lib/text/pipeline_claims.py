"""Notebook 02's sentences on preparing one image, chosen from its numbers: which part of preparing an image
(reading, decoding, augmenting) costs most here, whether one DataLoader worker prepares images faster than
the training process itself (0 workers), what one CPU core prepares (the loader with 0 workers, beside its
parts timed alone), and the cores that feed the model. Each is a :class:`tutorial_lib.text.claims.Claim`
(ranges that overlap are "not distinguishable here"), shown by the notebook and carried into ``SUMMARY.md``.
"""

from __future__ import annotations

from tutorial_lib.bench.timing import Spread, distinguishable
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE, Claim, _ratio_text, likely_cause, ratio_verdict, top_group

PART_NAMES = {"read": "reading the file", "decode": "decoding the JPEG", "augment": "augmenting (crop, resize, flip)"}


def largest_part(parts: dict[str, Spread | None]) -> Claim:
    """The part of preparing an image that takes longest here (``{part: Spread of ms per image}``, e.g. read,
    decode, augment): verdict ``<part> largest`` where its range separates from every other part's, else not
    distinguishable here; the sentence adds the images/s one process prepares from the medians."""
    parts = {name: spread for name, spread in parts.items() if spread is not None}
    if len(parts) < 2:
        return Claim("one image", "not measured", "the parts of preparing an image were not measured here")
    top = top_group(parts)
    listed = ", ".join(f"{name} {parts[name].text(2)}" for name in sorted(parts, key=lambda n: -parts[n].median))
    rate = 1000 / sum(spread.median for spread in parts.values())
    numbers = (f"({listed} ms per image; median and range over the rounds, one process on one thread); the "
               f"parts' medians add up to {1000 / rate:.2f} ms, about {rate:,.0f} images/s for the parts alone "
               "(the loader below also batches the images)")
    if len(top) > 1:
        return Claim("one image", NOT_DISTINGUISHABLE, f"which part of preparing an image takes longest is "
                     f"{NOT_DISTINGUISHABLE}: {' and '.join(top)} overlap {numbers}")
    largest = top[0]
    second = max((n for n in parts if n != largest), key=lambda n: parts[n].median)
    return Claim("one image", f"{largest} largest",
                 f"{PART_NAMES.get(largest, largest)} is the largest part of preparing an image here, "
                 f"{_ratio_text(parts[largest], parts[second])} the time of {second} {numbers}")


def process_vs_worker(zero_workers: Spread | None, one_worker: Spread | None) -> Claim:
    """The loader's images/s with 0 workers (the training process prepares the images itself) against 1 worker
    (one worker process prepares them, the training process receives the batches): ``worker faster``,
    ``process faster``, ``matters little`` (within 10%) or not distinguishable here."""
    if zero_workers is None or one_worker is None:
        return Claim("one process vs one worker", "not measured", "0 and 1 workers were not both measured here")
    numbers = f"1 worker {one_worker.text()} img/s, 0 workers {zero_workers.text()}"
    verdict = ratio_verdict(one_worker, zero_workers, "worker faster", "process faster")
    if verdict == "worker faster":
        sentence = (f"the loader delivered images faster with one worker process than with none, "
                    f"{_ratio_text(one_worker, zero_workers)} ({numbers}; "
                    + likely_cause("with a worker, two processes work at once: the worker prepares the next batch "
                                   "while the training process takes the last one") + ")")
    elif verdict == "process faster":
        sentence = (f"the loader delivered images faster with no worker than with one, "
                    f"{_ratio_text(zero_workers, one_worker)} ({numbers}; "
                    + likely_cause("handing each batch from the worker process to the training process (through "
                                   "shared memory), with the worker and other work sharing this machine's cores, "
                                   "cost more here than working at once gained") + ")")
    elif verdict == "matters little":
        faster, slower = ("the process", "the worker") if zero_workers.median >= one_worker.median \
            else ("the worker", "the process")
        ratio = _ratio_text(*((zero_workers, one_worker) if faster == "the process" else (one_worker, zero_workers)))
        ranges = "do not overlap" if distinguishable(zero_workers, one_worker) else "overlap"
        sentence = (f"one worker and the training process itself prepare images within 10% of each other, "
                    f"{faster} {ratio} {slower}, and their ranges {ranges} ({numbers}); both run the same "
                    "code on one torch thread; what a worker adds is that it works while the training process "
                    "trains")
    else:
        sentence = (f"one worker against the training process itself is {NOT_DISTINGUISHABLE} ({numbers}); both run "
                    "the same code on one torch thread; what a worker adds is that it works while the training "
                    "process trains")
    return Claim("one process vs one worker", verdict, sentence)


def one_core(zero_workers: Spread | None, parts: dict[str, Spread | None]) -> Claim:
    """What one CPU core prepares here: the loader with 0 workers (one process does everything, on one torch
    thread), beside what its parts (read, decode, augment; ms per image) timed alone allow. Verdict ``agree``
    where the parts' median rate lies within the loader's range, ``loader slower``/``loader faster`` where the
    ranges separate, and :data:`NOT_DISTINGUISHABLE` where the ranges overlap but the parts' median lies outside
    the loader's (the two are neither shown to agree nor to differ). This rate, not a worker's, is the one core
    of the cost model: a worker's rate also uses the training process's core."""
    parts = {name: spread for name, spread in parts.items() if spread is not None}
    if zero_workers is None or not parts:
        return Claim("one CPU core", "not measured", "the loader with 0 workers or the parts of an image were not "
                     "measured here")
    total = Spread(sum(p.median for p in parts.values()), sum(p.low for p in parts.values()),
                   sum(p.high for p in parts.values()))
    alone = Spread(1000 / total.median, 1000 / total.high, 1000 / total.low)
    listed = " + ".join(f"{parts[name].median:.2f}" for name in parts)
    numbers = (f"one process on one core prepared {zero_workers.text()} img/s in the loader with 0 workers; its "
               f"parts timed alone ({', '.join(parts)}: {listed} ms per image) allow {alone.text()} img/s")
    if zero_workers.low <= alone.median <= zero_workers.high:
        return Claim("one CPU core", "agree", f"{numbers}: the two agree, so one core prepares about "
                     f"{zero_workers.median:,.0f} images/s here")
    if not distinguishable(zero_workers, alone):
        return Claim("one CPU core", NOT_DISTINGUISHABLE, f"{numbers}: the ranges overlap, but the parts' median "
                     f"lies outside the loader's range, so whether the two agree is {NOT_DISTINGUISHABLE}; take one "
                     f"core as the loader's: about {zero_workers.median:,.0f} images/s here")
    if zero_workers.median < alone.median:
        return Claim("one CPU core", "loader slower", f"{numbers}: the loader is slower than its parts ("
                     + likely_cause("the loader's own work: sampling, batching, collation") + "); one core "
                     f"prepares about {zero_workers.median:,.0f} images/s in the loader here")
    return Claim("one CPU core", "loader faster", f"{numbers}: the loader measured faster than its parts allow ("
                 + likely_cause("other work on this machine during the parts' timing, or a cheaper decode in the "
                                "loader than in that timing") + "); take one core as about "
                 + f"{zero_workers.median:,.0f} images/s here")


def cores_to_feed(model: Spread | None, core: Spread | None) -> Claim:
    """The CPU cores (loader workers) the CPU pipeline needs to keep up with the model: the model's images/s over
    what one core prepares (``core``: :func:`one_core`'s loader with 0 workers), with the range the two ranges
    allow. Verdict ``one core`` where even the extremes need one, else ``<n> cores`` (n from the medians)."""
    from tutorial_lib.bench.data import workers_needed

    if model is None or core is None or core.low <= 0:
        return Claim("cores to feed the model", "not measured", "the model or one core's rate was not measured here")
    needed = workers_needed(model.median, core.median)
    fewest, most = workers_needed(model.low, core.high), workers_needed(model.high, core.low)
    spread = "" if fewest == most else f" (between {fewest} and {most} from the ranges)"
    verdict = "one core" if most <= 1 else f"{needed} cores"
    return Claim("cores to feed the model", verdict,
                 f"the model trains at {model.text()} img/s here; at one core's {core.text()} img/s the CPU pipeline "
                 f"needs {needed} CPU core{'s' * (needed != 1)} to keep up{spread}")
