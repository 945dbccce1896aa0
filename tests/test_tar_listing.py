"""The fast listing of a class tar (data.extract.plain_listing) against tarfile on generated archives: it gives
exactly tarfile's names or declines (None), so that tarfile reads it and names what is wrong."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from tutorial_lib.data.extract import plain_listing

_NAME = st.text(st.sampled_from("abn0123456789_.-/éJPEG"), min_size=1, max_size=120)
_MEMBER = st.tuples(_NAME, st.sampled_from([tarfile.REGTYPE, tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                                            tarfile.DIRTYPE]), st.integers(0, 1500))


def _tar(members, fmt) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, kind, size in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = size
                tar.addfile(info, io.BytesIO(bytes(size)))
            else:
                info.linkname = "target"
                tar.addfile(info)
    return buf.getvalue()


def _listing(raw: bytes, cut: int | None = None):
    with tempfile.TemporaryFile() as handle:
        handle.write(b"x" * 700 + raw[:cut])  # the class tar sits inside a larger file, as in the train archive
        handle.flush()
        return plain_listing(handle.fileno(), 700, len(raw[:cut]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_MEMBER, max_size=8), st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT,
                                                        tarfile.PAX_FORMAT]))
def test_the_fast_listing_is_tarfiles_or_declines(members, fmt):
    try:
        raw = _tar(members, fmt)
    except ValueError:  # a name ustar cannot hold
        return
    found = _listing(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        expected = [m.name for m in tar.getmembers() if not m.isdir()]
    if found is not None:
        assert found == expected
        assert all(m[1] == tarfile.REGTYPE and "/" not in m[0] for m in members)
    # an ImageNet-like class tar (regular files, short ASCII base names: one plain ustar header each) is listed
    # fast, not declined: a listing that always declines passed this test before
    if all(kind == tarfile.REGTYPE and "/" not in name and name.isascii() and len(name) <= 100
           and name not in (".", "..") for name, kind, _ in members):
        assert found == expected


def test_plain_imagenet_class_tars_are_listed_fast_and_anything_odd_declines():
    plain = [(f"n01440764_{i}.JPEG", tarfile.REGTYPE, 100 * i) for i in range(6)]
    raw = _tar(plain, tarfile.GNU_FORMAT)
    assert _listing(raw) == [name for name, _, _ in plain]
    assert _listing(raw, cut=1300) is None  # truncated in the second member's data: tarfile names it
    corrupt = bytearray(raw)
    corrupt[512 + 5] ^= 0xFF  # a byte of the second member's header (the first is empty): its checksum fails
    assert _listing(bytes(corrupt)) is None
    for odd in ([("n01440764/x.JPEG", tarfile.REGTYPE, 10)], [("x.JPEG", tarfile.SYMTYPE, 0)],
                [("n" * 150 + ".JPEG", tarfile.REGTYPE, 10)]):
        assert _listing(_tar(plain[:2] + odd, tarfile.GNU_FORMAT)) is None
    assert os.fsdecode(b"caf\xc3\xa9.JPEG") in _listing(_tar([("café.JPEG", tarfile.REGTYPE, 3)],
                                                             tarfile.USTAR_FORMAT))
