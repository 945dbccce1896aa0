"""Notebook 02's sentences on class folders against packed shards, chosen from its numbers: how many files an
epoch opens in each format, how fast the trainer's loader reads each, and what staging each costs. Each is a
:class:`tutorial_lib.text.claims.Claim`; speeds and times come as Spreads (ranges that overlap are "not
distinguishable here"), counts of opened files are exact.
"""

from __future__ import annotations

from tutorial_lib.bench.timing import Spread
from tutorial_lib.text.claims import NOT_DISTINGUISHABLE, Claim, _ratio_text, _seconds, ratio_verdict


def opens_per_epoch(files_opened: int, shards_opened: int, images: int) -> Claim:
    """Files an epoch of ``images`` training images opened from class folders against from shards (counted by
    the loaders, one process): ``fewer with shards``, ``fewer with files`` or ``the same``."""
    numbers = (f"an epoch of {images:,} training images opened {files_opened:,} files from the class folders and "
               f"{shards_opened:,} from the shards")
    if shards_opened == files_opened:
        return Claim("files opened", "the same", f"{numbers}: the same number of opens")
    if shards_opened < files_opened:
        return Claim("files opened", "fewer with shards",
                     f"{numbers}, {files_opened / max(shards_opened, 1):,.0f}x fewer with shards: on a parallel file "
                     "system each open is a request to its metadata server, which all jobs share")
    return Claim("files opened", "fewer with files",
                 f"{numbers}, {shards_opened / max(files_opened, 1):,.1f}x more with shards: with so few images per "
                 "shard and each worker opening the shards it reads, packing saves no opens here")


def loader_speed(files: Spread | None, shards: Spread | None, workers: int, table: Spread | None = None,
                 images: int | None = None) -> Claim:
    """The trainer's CPU loader with ``workers`` workers (images/s, median and range over interleaved rounds)
    from class folders against from shards: ``shards faster``, ``files faster``, ``matters little`` (within
    10%) or not distinguishable here.

    ``table``: the loader table's figure for the same worker count, a separate run timed another way; the
    sentence then gives both with their ranges and says they are two measurements (the issue-44 read: 254.6
    img/s in the table and 340.4 here, for "2 workers from files", with nothing saying why)."""
    topic = f"loader from shards, {workers} worker{'s' * (workers != 1)}"
    if files is None or shards is None:
        return Claim(topic, "not measured", "the loader was not measured from both formats here")
    epoch = f" of {images:,} training images" if images else ""
    numbers = (f"shards {shards.text()} img/s, files {files.text()} img/s: this comparison's own rounds, the "
               f"trainer's loader timed from its first batch to the end of one epoch{epoch}")
    if table is not None:
        numbers += (f"; a separate run from the loader table above, whose {workers}-worker row, timed for a "
                    f"set time per round after the workers' first batches, is {table.text()} img/s: two "
                    "measurements timed differently, not one figure")
    verdict = ratio_verdict(shards, files, "shards faster", "files faster")
    sentence = {"shards faster": f"the loader read the shards faster than the files, {_ratio_text(shards, files)}",
                "files faster": f"the loader read the files faster than the shards, {_ratio_text(files, shards)}",
                "matters little": "shards and files fed the loader within 10% of each other",
                }.get(verdict, f"the loader from shards against from files is {NOT_DISTINGUISHABLE}")
    return Claim(topic, verdict, f"{sentence} ({numbers})")


def staging_formats(files: Spread | None, shards: Spread | None, files_count: int, shard_count: int,
                    copy: Spread | None = None) -> Claim:
    """Seconds to stage (copy to a node-local folder, :mod:`tutorial_lib.data.staging`) the class folders
    (``files_count`` files) against the pack (``shard_count`` shards), median and range over interleaved rounds:
    ``shards faster``, ``files faster``, ``matters little`` or not distinguishable here. ``copy``: the staging
    section's own time for the files (:func:`tutorial_lib.bench.staging.measure_staging`), a separate run
    named as such beside this one (the issue-44 read: 0.0298 s there, 0.06 s here, as if one measurement)."""
    if files is None or shards is None:
        return Claim("staging shards", "not measured", "staging was not measured for both formats here")
    numbers = (f"staging {files_count:,} image files took {_seconds(files)} s, staging them as {shard_count:,} "
               f"shards {_seconds(shards)} s (this comparison's own rounds, each copy timed with a sync to disk")
    numbers += ")" if copy is None else (f"; a separate run from the staging section above, which timed the copy "
                                         f"alone, without the sync, at {_seconds(copy)} s: two measurements, not "
                                         "one figure)")
    # a time: less is better, so the speed ratio is files' time over the shards'
    verdict = ratio_verdict(Spread(1 / shards.median, 1 / shards.high, 1 / shards.low),
                            Spread(1 / files.median, 1 / files.high, 1 / files.low), "shards faster", "files faster")
    sentence = {"shards faster": f"the pack took {_ratio_text(shards, files)} the files' time, a copy per file "
                                 "replaced by a few large ones",
                "files faster": f"the pack took longer, {_ratio_text(shards, files)} the files' time",
                "matters little": "within 10% of each other"}.get(verdict, NOT_DISTINGUISHABLE)
    return Claim("staging shards", verdict, f"{numbers}: {sentence}")


def compared_formats(packed: dict, loader_table: dict | None = None, staging_copy: Spread | None = None) -> list[Claim]:
    """Notebook 02's three sentences on :func:`tutorial_lib.bench.shards.compare_formats`'s ``packed``: files
    opened, the loader's speed and staging per format. ``loader_table``: the loader table's records by worker
    count, ``staging_copy``: the staging section's copy time; each is named beside this comparison's own
    figure as a separate run."""
    table = (loader_table or {}).get(packed["workers"])
    return [opens_per_epoch(packed["opened"]["files"], packed["opened"]["shards"], packed["train_images"]),
            loader_speed(packed["load"]["files"], packed["load"]["shards"], packed["workers"],
                         Spread.from_record(table) if table else None, packed["train_images"]),
            staging_formats(packed["stage"]["files"], packed["stage"]["shards"], packed["images"], packed["shards"],
                            staging_copy)]
