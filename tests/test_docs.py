"""The README and docs/ pages: every relative link resolves, and every command in a fenced ```bash block runs as
written: its program exists and every ``--flag`` it uses is one that program's ``--help`` lists."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tutorial_lib import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
PYTHON_LAUNCHERS = {"python", "python3"}


def slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page) -> set[str]:
    """The anchors of a page's headings."""
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", page.read_text(), re.M)}


def bash_commands(page) -> list[str]:
    """The commands of a page's fenced bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


ALL_COMMANDS = [(page.relative_to(REPO_ROOT).as_posix(), words) for page in PAGES for words in bash_commands(page)]


@functools.cache
def help_text(*argv: str) -> str:
    """What ``argv --help`` prints (stdout and stderr), checked to have exited 0."""
    result = subprocess.run([*argv, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, f"{' '.join(argv)} --help failed: {result.stderr[-2000:]}"
    return result.stdout + result.stderr


def flags_of(words: list[str]) -> list[str]:
    """The long options a command line uses, without their ``=value``."""
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]


def check_flags(program: list[str], words: list[str]) -> None:
    """Each ``--flag`` of words is listed by program's help."""
    listed = set(re.findall(r"--[A-Za-z0-9][\w-]*", help_text(*program)))
    unknown = [f for f in flags_of(words) if f not in listed and f != "--help"]
    assert not unknown, f"{' '.join(program)} does not accept {unknown}"


def check_module(words: list[str]) -> None:
    """``-m MODULE [subcommand] args...``: the module runs as a program, and takes the subcommand and flags."""
    assert words[0] == "-m", words
    module, args = words[1], words[2:]
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"no module {module}"
    if spec.submodule_search_locations is not None:
        assert importlib.util.find_spec(f"{module}.__main__") is not None, f"{module} has no __main__"
    program = [sys.executable, "-m", module]
    if args and not args[0].startswith("-"):
        choices = re.search(r"\{([\w,-]+)\}", help_text(*program))
        if choices and args[0] in choices.group(1).split(","):
            program.append(args[0])
    check_flags(program, args)


def split_torchrun(words: list[str]) -> tuple[list[str], list[str]]:
    """torchrun's own options, and the ``-m MODULE ...`` part it runs."""
    at = words.index("-m")
    return words[:at], words[at:]


def check_command(words: list[str]) -> None:
    """One documented command line, by its program."""
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value prefixes
        words = words[1:]
    program, args = words[0], words[1:]
    if program == "make":
        targets = set(re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.M))
        for arg in args:
            if "=" in arg:
                name, value = arg.split("=", 1)
                assert re.search(rf"^{name} \?=", (REPO_ROOT / "Makefile").read_text(), re.M), name
                if "/" in value:
                    assert (REPO_ROOT / value).exists(), value
            else:
                assert arg in targets, f"make has no target {arg}"
    elif program in PYTHON_LAUNCHERS:
        check_module(args)
    elif program == "torchrun":
        own, rest = split_torchrun(args)
        check_flags([sys.executable, "-m", "torch.distributed.run"], own)
        check_module(rest)
    elif program == "sbatch":
        script_at = next(i for i, w in enumerate(args) if w.endswith(".sbatch"))
        assert (REPO_ROOT / args[script_at]).is_file(), args[script_at]
        if shutil.which("sbatch"):
            check_flags(["sbatch"], args[:script_at])
        check_module(["-m", "tutorial_lib.train", *args[script_at + 1:]])  # train.sbatch passes them on
    elif program == "bash":
        script = REPO_ROOT / args[0]
        assert script.is_file(), args[0]
        stages = re.search(r'^STAGES="([^"]*)"', script.read_text(), re.M)
        assert stages, f"{args[0]}: the test knows only gpu_bench.sh's STAGES"
        unknown = set(args[1:]) - set(stages.group(1).split())
        assert not unknown, f"{args[0]} has no stage {sorted(unknown)}"
    else:
        pytest.fail(f"no rule to check the program {program!r}: add one to tests/test_docs.py")


def test_every_page_has_commands_checked_and_the_readme_is_a_map():
    assert len(ALL_COMMANDS) >= 10
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 160
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", (REPO_ROOT / "README.md").read_text()))
    assert linked == {p.relative_to(REPO_ROOT).as_posix() for p in PAGES[1:]}, "a docs/ page the README misses"


@pytest.mark.parametrize("where,words", ALL_COMMANDS, ids=[" ".join(w)[:60] for _, w in ALL_COMMANDS])
def test_a_documented_command_runs_as_written(where, words):
    check_command(words)


def test_a_wrong_flag_or_program_is_caught():
    """The checks can fail: a flag no program takes, a module that does not exist, a missing make target."""
    for words in (["python", "-m", "tutorial_lib.data", "prepare", "S", "D", "--no-such-flag"],
                  ["python", "-m", "tutorial_lib.no_such_module"], ["make", "no-such-target"],
                  ["bash", "cluster_scripts/gpu_bench.sh", "no-such-stage"]):
        with pytest.raises(AssertionError):
            check_command(words)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page):
    text = page.read_text()
    assert "../shared" not in text and "/work/" not in text
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: no heading for #{anchor} in {resolved.name}"
