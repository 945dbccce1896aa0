"""``python -m tutorial_lib.data pack PREPARED SHARDS``: a prepared ImageNet as tar shards of about N MB.

Why: a class-folder ImageNet is 1,331,167 files, and every epoch opens each of them; on a parallel file system
(Lustre, GPFS) the metadata server sets that pace. Packed, the same images are a few hundred tar files: an epoch
opens each shard a few times and reads it in large, mostly sequential pieces (FFCV's ``.beton``, DALI over
TFRecord/RecordIO and WebDataset's tar shards are the same idea).

Layout (WebDataset's): each sample is ``<key>.cls`` (the class number) and ``<key>.jpg`` (the file's bytes as
they are), written by the webdataset library's ``TarWriter``; plain ``tar`` and webdataset read the shards as
they are. The training images go in one order shuffled at pack time (from ``seed``), the validation images in
the prepared folder's order. Each shard starts with a PAX global header naming the pack; ``shards.json`` (see
:mod:`.shard_index`) lists the shards with their samples, bytes and SHA-256, the classes and where each sample
lies. ``--max-side N`` re-encodes every image whose longer side exceeds N to that side (JPEG quality 90): FFCV's
idea to save bytes and decode time, which CHANGES the images (the index records how many and how).

The rules of ``prepare``: nothing is written into PREPARED; SHARDS must be new, empty, or a pack this command
started from the same PREPARED with the same settings (it resumes: finished shards are kept); one run at a time
(a lock); the classes and the free space are checked before the first write; a progress bar of files and bytes;
every fault one line. The checks run without torch; the webdataset package imports torch when it is loaded, so
the first shard waits for that import (seconds).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import random
import shutil
import stat
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tutorial_lib.data import PrepareError, file_index
from tutorial_lib.data.prepare import locked
from tutorial_lib.data.shard_index import FORMAT, INDEX, PACK_COMMAND, PACK_HEADER, VERSION

STATE = ".tutorial_pack.jsonl"  # this command's mark in SHARDS: source, settings, pack id; a line per finished shard
LOCK = ".tutorial_pack.lock"
READERS = 16  # files read ahead in threads while a shard is written (random order: reads wait on the disk)
QUALITY = 90  # JPEG quality of the images --max-side re-encodes
MTIME = 1_600_000_000  # every member's time: an int, so no PAX header per member, and packs compare equal
_HEADERS = 3 * tarfile.BLOCKSIZE  # per sample: two member headers and padding, at most


def _fail(field: str, problem: str, fix: str):
    raise PrepareError(f"{field}: {problem}. Fix: {fix}.")


def _read_file(path: str) -> bytes:
    """A regular file's bytes (a FIFO named like an image would block: refused, as the trainer does)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENXIO, "not a regular file (a FIFO, device or socket)", path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


def shrink(data: bytes, max_side: int) -> bytes | None:
    """The image re-encoded (JPEG, :data:`QUALITY`) with its longer side ``max_side``, or None if it is not
    larger than that or PIL cannot decode it (kept as it is: the trainer then handles it as unreadable)."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        if max(image.size) <= max_side:
            return None
        image = image.convert("RGB")
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        image.save(out, "JPEG", quality=QUALITY)
        return out.getvalue()
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def sample_key(position: int, relative: str) -> str:
    """A sample's key: its position in the split, then the file's stem (dots would split a WebDataset key)."""
    stem = os.path.splitext(os.path.basename(relative))[0]
    return f"{position:08d}_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:80]


class _Hashing:
    """A file object that counts and hashes what tarfile writes through it."""

    def __init__(self, raw):
        self.raw, self.sha, self.size = raw, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)


def _listing(prepared: Path) -> dict[str, dict]:
    """Each split's scan (the job's file-index rules); PrepareError for splits that cannot be packed."""
    found = {}
    for name in ("train", "val"):
        if not (prepared / name).is_dir():
            _fail("PREPARED", f"{prepared} has no {name}/ folder", "pass the folder `python -m tutorial_lib.data "
                  "prepare SOURCE DEST` made (DEST/train/<class>/, DEST/val/<class>/)")
        found[name] = file_index.scan(prepared / name)
    if found["train"]["classes"] != found["val"]["classes"]:
        only = sorted(set(found["train"]["classes"]) ^ set(found["val"]["classes"]))[:5]
        _fail("PREPARED", f"{prepared}/train and val have different class folders (in one only: {only})",
              "give both splits the same class folders (prepare does)")
    if not any(found["train"]["files"]):
        _fail("PREPARED", f"{prepared}/train holds no images", "pass a prepared folder with training images")
    return found


def _order(scan: dict, root: Path, shuffle_seed: int | None) -> list[tuple[str, int]]:
    samples = [(str(root / rel), label) for label, files in enumerate(scan["files"]) for rel in files]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(samples)
    return samples


def _read_state(shards: Path) -> tuple[dict, list[dict]] | None:
    """The header and the finished shards of an earlier pack's state file (None: there is none, or it is not
    ours); a line torn by a crash is left out."""
    try:
        lines = (shards / STATE).read_text().splitlines()
        header = json.loads(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    entries = []
    for line in lines[1:]:
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    return (header, entries) if isinstance(header, dict) and header.get("made_by") == PACK_COMMAND else None


def _check_destination(shards: Path, prepared: Path, settings: dict) -> tuple[dict, list[dict]]:
    """The state of an earlier pack into ``shards`` (``({}, [])`` if new); PrepareError unless SHARDS is new,
    empty, or a pack this command started from the same PREPARED with the same settings."""
    real_shards, real_prepared = shards.resolve(), prepared.resolve()
    if real_shards == real_prepared or real_prepared in real_shards.parents or real_shards in real_prepared.parents:
        _fail("SHARDS", f"{shards} overlaps PREPARED {prepared}, and nothing is ever written into PREPARED",
              "pass a SHARDS folder outside PREPARED (and not one that holds it)")
    if shards.exists() and not shards.is_dir():
        _fail("SHARDS", f"{shards} is not a folder", "pass a new or empty folder")
    if not shards.is_dir() or not any(e.name != LOCK for e in shards.iterdir()):
        return {}, []
    state = _read_state(shards)
    if state is None:
        _fail("SHARDS", f"{shards} already holds files that `{PACK_COMMAND}` did not write", "pass a new or empty "
              "folder (nothing in it was changed)")
    header = state[0]
    if header.get("source") != str(real_prepared) or header.get("settings") != settings:
        _fail("SHARDS", f"{shards} holds a pack of {header.get('source')} with {header.get('settings')}, not of "
              f"{real_prepared} with {settings}", "pass a new or empty folder, or the same PREPARED and settings "
              "(to resume or reuse it)")
    return state


def _write_json(path: Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def _write_shard(path: Path, pack: str, samples: list[tuple[str, int]], first: int, max_side: int, bar) -> dict:
    """One shard of ``samples`` (positions from ``first``) at ``path`` (through ``<path>.partial``); returns its
    index entry (with how many images ``max_side`` re-encoded)."""
    from webdataset.writer import TarWriter

    partial = path.with_name(path.name + ".partial")
    spans, labels = [], []
    with open(partial, "wb") as raw:
        out = _Hashing(raw)
        out.write(tarfile.TarInfo.create_pax_global_header({PACK_HEADER: pack}))
        base = out.size
        writer = TarWriter(out, encoder=False, mtime=MTIME, user="", group="", mode=0o444)
        with ThreadPoolExecutor(READERS) as readers:  # in order, READERS reads ahead: the order is random
            contents = readers.map(_read_file, [source for source, _ in samples])
            for position, ((source, label), data) in enumerate(zip(samples, contents, strict=True), first):
                _add(writer, position, source, label, data, max_side, spans, labels, base)
                bar.update(len(data))
        writer.close()
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(partial, path)
    return {"name": path.name, "first": first, "samples": len(samples), "bytes": out.size,
            "sha256": out.sha.hexdigest(), "reencoded": sum(1 for _, _, changed in spans if changed),
            "spans": [[offset, length] for offset, length, _ in spans],
            "labels": labels}


def _add(writer, position: int, source: str, label: int, data: bytes, max_side: int, spans: list, labels: list,
         base: int) -> None:
    """One sample (``<key>.cls``, ``<key>.jpg``) written; its span (and whether ``max_side`` re-encoded it) noted."""
    smaller = shrink(data, max_side) if max_side else None
    start = writer.tarstream.offset
    writer.write({"__key__": sample_key(position, source), "cls": str(label).encode(),
                  "jpg": data if smaller is None else smaller})
    spans.append((base + start, writer.tarstream.offset - start, smaller is not None))
    labels.append(label)


def _cut(sizes: list[int], shard_bytes: int) -> list[tuple[int, int]]:
    """``(first, stop)`` of each shard: consecutive samples until about ``shard_bytes`` (sizes of the files; an
    image re-encoded smaller makes its shard smaller, the cut stays the same, so a resumed pack cuts alike)."""
    cuts, first, size = [], 0, 0
    for position, file_size in enumerate(sizes):
        size += file_size + _HEADERS
        if size >= shard_bytes:
            cuts.append((first, position + 1))
            first, size = position + 1, 0
    return cuts + [(first, len(sizes))] if first < len(sizes) else cuts


def _shard_name(split: str, number: int) -> str:
    return f"{split}-{number:06d}.tar"


SHARD_MB = (0.001, 1_000_000)  # a shard of 1 KB to 1 TB: smaller holds no image, larger no tar tool copies well


def pack(prepared: str | os.PathLike, shards: str | os.PathLike, shard_mb: float = 100, max_side: int = 0,
         seed: int = 0, progress: bool = True) -> dict:
    """Pack the class folders of ``prepared`` into tar shards in ``shards`` (see the module's docstring); return a
    summary (images, shards, bytes, re-encoded images, seconds). PrepareError, one line, before the first write
    for what can be checked first; a fault of the file system while writing is one line too."""
    started = time.perf_counter()
    prepared, shards = Path(prepared).expanduser().absolute(), Path(shards).expanduser().absolute()
    if not SHARD_MB[0] <= shard_mb <= SHARD_MB[1]:  # nan too; past the largest, MB x 1e6 overflowed (r43v)
        _fail("--shard-mb", f"{shard_mb} is not a size from {SHARD_MB[0]:g} to {SHARD_MB[1]:,} MB",
              "pass a size in MB, e.g. 100")
    if max_side < 0:
        _fail("--max-side", f"{max_side} is not a side in pixels", "pass a positive number of pixels, or 0 for none")
    if not prepared.is_dir():
        _fail("PREPARED", f"{prepared} is not a folder", "pass the folder `python -m tutorial_lib.data prepare` made")
    settings = {"shard_mb": shard_mb, "max_side": max_side, "seed": seed}
    header, entries = _check_destination(shards, prepared, settings)
    try:
        return _pack(prepared, shards, settings, header, entries, progress, started)
    except OSError as exc:
        fix = ("free space there or pass a SHARDS folder on a larger disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else "make it readable (and SHARDS writable) for you")
        _fail("SHARDS" if str(exc.filename or "").startswith(str(shards)) else "PREPARED",
              f"cannot read or write {exc.filename or prepared}: {exc.strerror or exc}",
              f"{fix}, then run the same command again (it resumes)")


def _pack(prepared: Path, shards: Path, settings: dict, header: dict, entries: list[dict], progress: bool,
          started: float) -> dict:
    found = _listing(prepared)
    splits = {"train": _order(found["train"], prepared / "train", settings["seed"]),
              "val": _order(found["val"], prepared / "val", None)}
    sizes = {name: [os.stat(source).st_size for source, _ in samples] for name, samples in splits.items()}
    cuts = {name: _cut(sizes[name], int(settings["shard_mb"] * 1e6)) for name in splits}
    done = {e["name"]: e for e in entries
            if (shards / e["name"]).is_file() and (shards / e["name"]).stat().st_size == e["bytes"]}
    todo = [(name, i) for name in splits for i in range(len(cuts[name])) if _shard_name(name, i) not in done]
    needed = sum(sum(sizes[name][slice(*cuts[name][i])]) + _HEADERS * (cuts[name][i][1] - cuts[name][i][0])
                 for name, i in todo)
    existing = next(p for p in (shards, *shards.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if needed > free:
        _fail("SHARDS", f"the shards need {needed / 1e9:.2f} GB, {existing} has {free / 1e9:.2f} GB free",
              "free space or pass a SHARDS folder on a larger disk (a stopped pack resumes)")
    shards.mkdir(parents=True, exist_ok=True)
    with locked(shards, LOCK, "SHARDS", "`" + PACK_COMMAND + "`"):
        if not header:
            header = {"made_by": PACK_COMMAND, "source": str(prepared.resolve()), "settings": settings,
                      "pack": uuid.uuid4().hex}
            _write_json(shards / STATE, header)
        (shards / INDEX).unlink(missing_ok=True)  # written again, last, when every shard is there
        finished = list(done.values()) + _write_missing(shards, header["pack"], splits, sizes, cuts, todo,
                                                        settings["max_side"], progress)
        index = _index(header, found, splits, settings, finished)
        _write_json(shards / INDEX, index)
    return {"shards_dir": str(shards), "train": len(splits["train"]), "val": len(splits["val"]),
            "classes": len(found["train"]["classes"]), "shards": len(finished),
            "bytes": sum(e["bytes"] for e in finished), "reencoded": sum(e["reencoded"] for e in finished),
            "seconds": time.perf_counter() - started}


def _write_missing(shards: Path, pack_id: str, splits: dict, sizes: dict, cuts: dict, todo: list, max_side: int,
                   progress: bool) -> list[dict]:
    """Write the shards in ``todo``, appending each one's entry to the state file as it is finished."""
    from tqdm.auto import tqdm

    total = sum(sum(sizes[name][slice(*cuts[name][i])]) for name, i in todo)
    images = sum(cuts[name][i][1] - cuts[name][i][0] for name, i in todo)
    written = []
    with tqdm(total=total, desc=f"packing {images:,} images", unit="B", unit_scale=True, disable=not progress,
              leave=False) as bar, open(shards / STATE, "a") as state:
        for name, number in todo:
            first, stop = cuts[name][number]
            entry = _write_shard(shards / _shard_name(name, number), pack_id, splits[name][first:stop], first,
                                 max_side, bar)
            written.append({"split": name, **entry})
            state.write(json.dumps(written[-1], separators=(",", ":")) + "\n")
            state.flush()
            bar.set_postfix_str(f"{sum(e['samples'] for e in written):,} images, {len(written):,} shards",
                                refresh=False)
    return written


def _index(header: dict, found: dict, splits: dict, settings: dict, finished: list[dict]) -> dict:
    side = settings["max_side"]
    changed = None if not side else {
        "max_side": side, "reencoded": sum(e["reencoded"] for e in finished), "quality": QUALITY,
        "note": f"every image whose longer side exceeded {side} px was decoded, resized to that side (LANCZOS) and "
                f"re-encoded as JPEG quality {QUALITY}: these images differ from the prepared files"}
    shards = {name: sorted((e for e in finished if e["split"] == name), key=lambda e: e["first"]) for name in splits}
    return {"format": FORMAT, "version": VERSION, "pack": header["pack"], "made_by": PACK_COMMAND,
            "source": header["source"], "settings": settings, "images_changed": changed,
            "splits": {name: {"classes": found[name]["classes"], "images": len(splits[name]),
                              "order": "shuffled at pack time (seed)" if name == "train" else "as prepared",
                              "shards": [{k: v for k, v in e.items() if k != "split"} for e in shards[name]]}
                       for name in splits}}
