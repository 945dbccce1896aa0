"""Notebook 02's sentences on preparing one image, chosen from its numbers: which part of preparing an image
(reading, decoding, augmenting) costs most here, and whether one DataLoader worker prepares images faster than
the training process itself (0 workers). Each is a :class:`tutorial_lib.text.claims.Claim` (ranges that
overlap are "not distinguishable here"), shown by the notebook and carried into ``SUMMARY.md``.
"""

from __future__ import annotations

from tutorial_lib.bench.timing import Spread, distinguishable
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE, Claim, _ratio_text, ratio_verdict, top_group

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
    numbers = (f"({listed} ms per image; median and range over the rounds, one process on one thread); from the "
               f"medians one process prepares about {rate:,.0f} images/s")
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
        sentence = (f"one worker process prepares images faster than the training process itself, "
                    f"{_ratio_text(one_worker, zero_workers)} ({numbers}): with a worker, the worker prepares the "
                    "next batch while the training process collects the last one, two processes at once")
    elif verdict == "process faster":
        sentence = (f"the training process prepares images faster by itself than one worker does, "
                    f"{_ratio_text(zero_workers, one_worker)} ({numbers}): handing each batch from the worker "
                    "process to the training process (through shared memory), with the worker competing for this "
                    "machine's cores, cost more here than the overlap gains")
    elif verdict == "matters little":
        faster, slower = ("the process", "the worker") if zero_workers.median >= one_worker.median \
            else ("the worker", "the process")
        ratio = _ratio_text(*((zero_workers, one_worker) if faster == "the process" else (one_worker, zero_workers)))
        ranges = "do not overlap" if distinguishable(zero_workers, one_worker) else "overlap"
        sentence = (f"one worker and the training process itself prepare images within 10% of each other, "
                    f"{faster} {ratio} {slower}, and their ranges {ranges} ({numbers}); both run the same "
                    "code on one torch thread; a worker pays off because it works while the training process "
                    "trains")
    else:
        sentence = (f"one worker against the training process itself is {NOT_DISTINGUISHABLE} ({numbers}); both run "
                    "the same code on one torch thread; a worker pays off because it works while the training "
                    "process trains")
    return Claim("one process vs one worker", verdict, sentence)
