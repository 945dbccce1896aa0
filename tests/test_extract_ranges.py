"""The validation images are extracted by sending GNU tar only the wanted members' bytes
(:func:`tutorial_lib.data.extract.member_ranges`): long-name and pax headers travel with their member, and
only the wanted members are written, with their own bytes."""

from __future__ import annotations

import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st
from tqdm import tqdm

from tutorial_lib.data.extract import extract_val, member_ranges

NAMES = ["ILSVRC2012_val_00000001.JPEG", "x" * 150 + ".JPEG", "pax_ü_name.JPEG", "ILSVRC2012_val_00000004.JPEG",
         "y" * 120 + ".JPEG", "ILSVRC2012_val_00000006.JPEG"]


def _archive(path, fmt) -> list[tarfile.TarInfo]:
    with tarfile.open(path, "w", format=fmt) as tar:
        for position, name in enumerate(NAMES):
            data = name.encode() * (position + 1)  # each its own bytes and size
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(path) as tar:
        return tar.getmembers()


@settings(max_examples=12, deadline=None)
@given(wanted=st.lists(st.booleans(), min_size=len(NAMES), max_size=len(NAMES)).filter(any),
       fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
def test_only_the_wanted_members_are_written_with_their_own_bytes(tmp_path_factory, wanted, fmt):
    tmp = tmp_path_factory.mktemp("ranges")
    members = _archive(tmp / "val.tar", fmt)
    chosen = [m for m, keep in zip(members, wanted, strict=True) if keep]
    targets = [tmp / "val" / f"class{i % 2}" / m.name for i, m in enumerate(chosen)]
    with tqdm(disable=True) as bar:
        extract_val(tmp / "val.tar", chosen, targets, tmp / "val" / ".part-flat", bar)
    written = {p.name: p.read_bytes() for folder in (tmp / "val").iterdir() for p in folder.iterdir()}
    assert written == {m.name: m.name.encode() * (NAMES.index(m.name) + 1) for m in chosen}
    assert not (tmp / "val" / ".part-flat").exists()


def test_neighbouring_members_are_sent_as_one_range_and_a_gap_splits_them(tmp_path):
    members = _archive(tmp_path / "val.tar", tarfile.GNU_FORMAT)
    whole = member_ranges(members)
    data = (tmp_path / "val.tar").read_bytes()
    assert len(whole) == 1 and whole[0][0] == 0 and whole[0][1] >= members[-1].offset_data + members[-1].size
    assert not any(data[whole[0][1]:])  # what is left is the end-of-archive blocks
    split = member_ranges(members[:2] + members[3:])
    assert len(split) == 2 and split[1][0] == members[3].offset
