"""``python -m tutorial_lib.data prepare SOURCE DEST``: ImageNet in any common form, as class folders; ``pack PREPARED
SHARDS``: those class folders as tar shards (:mod:`.pack`)."""

from __future__ import annotations

import sys

from tutorial_lib.data.layouts import PrepareError, detect
from tutorial_lib.data.prepare import prepare
from tutorial_lib.exits import ArgumentParser, check_path_arguments, run_main


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run it; one line naming the problem and the exit status of
    :mod:`tutorial_lib.exits` (2 on bad input, 1 for a full disk, 130 on Ctrl-C)."""
    return run_main(lambda: _main(argv), refused=(PrepareError,))


def _main(argv: list[str] | None) -> int:
    parser = ArgumentParser(prog="python -m tutorial_lib.data", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("prepare", help="write DEST/{train,val}/<wnid>/ from SOURCE (SOURCE is not changed)")
    make.add_argument("source", metavar="SOURCE", help="the archives, the Kaggle download, or train/ and val/")
    make.add_argument("dest", metavar="DEST", help="a new or empty folder (or one this command started: resumes)")
    make.add_argument("--val-labels", metavar="FILE", help="ground truth of a flat val/ (LOC_val_solution.csv, "
                      "a val.txt of 'FILE LABEL' lines, or the devkit archive) when SOURCE has none")
    make.add_argument("--subset", action="store_true", help="accept 1,000 classes with fewer images than ImageNet")
    make.add_argument("--no-progress", action="store_true", help="no progress bar")
    packer = commands.add_parser("pack", help="write PREPARED's images as tar shards of about N MB in SHARDS "
                                 "(WebDataset layout; train with --data-format shards --data-dir SHARDS)")
    packer.add_argument("prepared", metavar="PREPARED", help="the class folders `prepare` made (never written to)")
    packer.add_argument("shards", metavar="SHARDS", help="a new or empty folder (or one this command started: resumes)")
    packer.add_argument("--shard-mb", type=float, default=100, help="about this many MB per shard (default 100)")
    packer.add_argument("--max-side", type=int, default=0, help="re-encode images whose longer side exceeds this "
                        "many pixels to that side (CHANGES those images; recorded in the index); 0: keep every byte")
    packer.add_argument("--seed", type=int, default=0, help="the training images' order in the shards")
    packer.add_argument("--no-progress", action="store_true", help="no progress bar")
    show = commands.add_parser("detect", help="say which form SOURCE holds")
    show.add_argument("source", metavar="SOURCE")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        check_path_arguments({"SOURCE": args.source, "--val-labels": args.val_labels}, {"DEST": args.dest})
    elif args.command == "pack":
        check_path_arguments({"PREPARED": args.prepared}, {"SHARDS": args.shards})
    else:
        check_path_arguments({"SOURCE": args.source})
    if args.command == "detect":
        found = detect(args.source)
        print(f"{found.form}: train {found.train}, val {found.val}, labels {found.labels}")
        return 0
    if args.command == "pack":
        from tutorial_lib.data.pack import pack

        done = pack(args.prepared, args.shards, args.shard_mb, args.max_side, args.seed, not args.no_progress)
        changed = f"; {done['reencoded']:,} images re-encoded to --max-side" if args.max_side else ""
        print(f"{done['train']:,} training and {done['val']:,} validation images of {done['classes']:,} classes in "
              f"{done['shards']:,} shards ({done['bytes'] / 1e6:,.1f} MB) in {done['shards_dir']} "
              f"({done['seconds']:.1f} s{changed}). Train with --data-format shards --data-dir {done['shards_dir']}")
        return 0
    summary = prepare(args.source, args.dest, args.val_labels, args.subset, not args.no_progress)
    how = "linked to SOURCE" if summary["made"] == "links" else "extracted"
    print(f"{summary['form']}: {summary['train']:,} training and {summary['val']:,} validation images of "
          f"{summary['classes']:,} classes {how} in {summary['dest']} ({summary['seconds']:.1f} s; "
          f"{summary['skipped']:,} system files such as ._* and .DS_Store skipped). "
          f"Train with --dataset imagefolder --data-dir {summary['dest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
