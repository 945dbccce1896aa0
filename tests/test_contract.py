"""The contract every command keeps, driven with generated bad input (Hypothesis).

Each case runs a command's ``main(argv)`` in this process (a subprocess per case would be too slow) inside a
fresh sandbox holding a user's data tree (``source/``), a user's notes beside it and in the destination, and a
working directory of its own, then checks, whatever the input:

* no traceback: ``main`` returns (an exception that escapes is a bug), stderr holds no ``Traceback``;
* the exit status is one of :data:`tutorial_lib.exits.EXIT_STATUSES`, and a non-zero one comes with an
  ``error:`` line;
* the source tree is unchanged (every file's content hashed before and after), nothing is written outside
  the command's destination, and nothing the project did not write is removed (the user's notes stay).

Derandomized with a bounded number of examples, so CI sees the same cases every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extras: pip install -e .[test]")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tutorial_lib.exits import EXIT_STATUSES  # noqa: E402

CASES = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Strings a careless or hostile user types: control characters, newlines, shell words, long or unusual unicode.
# No NUL: a command line cannot hold one.
HOSTILE_WORDS = ["", " ", "\n", "a\nb", "run\n", "\t", "\x1b[31mred", "$(touch pwned)", "`touch pwned`",
                 "; rm -rf ~", "a|b", "../..", "..", ".", "~", "~/x", "$HOME", "-", "--", "x" * 4000, "ſ", "İ",
                 "\u202eevil", "名前", "\U0001f600", "\udcff", "-1", "nan"]
TEXT = st.one_of(st.sampled_from(HOSTILE_WORDS),
                 st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30))
NUMBER_WORDS = ["nan", "NaN", "inf", "-inf", "-1", "0", "-0", "1e308", "1e400", "99999999999999999999",
                "0x10", "1_000", "", " 1", "1.5", "true", "None", "1e-320"]
NUMBER = st.one_of(st.sampled_from(NUMBER_WORDS), st.floats().map(repr), st.integers().map(str))
# Paths the sandbox makes (see _make_path): missing, symlinked into the source, a FIFO, torn or empty files...
PATH_KINDS = ["missing", "empty-dir", "fifo", "empty-file", "torn-json", "binary-file", "link-into-source",
              "source", "inside-source", "dangling-link", "link-loop", "file-as-parent", "notes-dir"]
PATH = st.one_of(st.sampled_from(PATH_KINDS).map(lambda kind: ("kind", kind)), TEXT.map(lambda text: ("text", text)))
YAML_TEXTS = ["epochs: 1\nepochs: 2\n", "site:\n  python: a\n  python: b\n", "!!python/object/apply:os.system ['x']",
              "a: !!python/name:os.system\n", "[1, 2", "{", "a: b: c", "\x07: 1", "output_root: ~\n", "- 1\n- 2\n",
              "", "\n\n", "a: [1\n", "\t\tx: 1", "nodes: 300\n", "ranks_per_node: -1\n"]
YAML = st.one_of(st.sampled_from(YAML_TEXTS), TEXT)
TORCH_BYTES = [b"", b"PK\x03\x04torn", b"\x80\x02}q\x00.", b'{"format": 1}', b"\x00" * 64, os.urandom(100)]


def _snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict:
    """path -> (kind, content hash or link target) of everything under ``root``, links not followed."""
    found = {}
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if any(here == s or s in here.parents for s in skip):
            dirs[:] = []
            continue
        for name in dirs + names:
            path = here / name
            if any(path == s or s in path.parents for s in skip):
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[str(path)] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mode & 0o7777)
            else:
                found[str(path)] = (stat.S_IFMT(info.st_mode), info.st_mode & 0o7777)
    return found


class Sandbox:
    """A fresh folder per case: ``source/`` (the user's data, checksummed), ``dest/`` (the command's own, with
    the user's notes in it), ``home/`` (``~``), ``cwd/`` (the working directory)."""

    def __init__(self, root: Path):
        self.root = root
        self.source, self.dest, self.home, self.cwd = (root / n for n in ("source", "dest", "home", "cwd"))
        for folder in (self.source / "sub", self.dest, self.home, self.cwd):
            folder.mkdir(parents=True)
        (self.source / "thesis.tex").write_text("the user's own work")
        (self.source / "sub" / "data.bin").write_bytes(os.urandom(256))
        (root / "notes.txt").write_text("beside the command's folders")
        (self.dest / "users-notes.txt").write_text("the user's file in the destination")
        self.allowed: list[Path] = [self.dest, self.home]
        self._count = 0

    def path(self, spec: tuple[str, str], content: bytes = b'{"torn": ') -> str:
        """A path of the generated kind (made in the sandbox), or the generated text itself."""
        how, value = spec
        if how == "text":
            return value
        self._count += 1
        target = self.root / f"p{self._count}"
        if value == "missing":
            pass
        elif value == "empty-dir":
            target.mkdir()
        elif value == "fifo":
            os.mkfifo(target)
        elif value == "empty-file":
            target.write_bytes(b"")
        elif value == "torn-json":
            target.write_bytes(content)
        elif value == "binary-file":
            target.write_bytes(b"\xff\xfe\x00\x01" * 64)
        elif value == "link-into-source":
            target.symlink_to(self.source / "sub")
        elif value == "source":
            return str(self.source)
        elif value == "inside-source":
            return str(self.source / "sub")
        elif value == "dangling-link":
            target.symlink_to(self.root / "nowhere")
        elif value == "link-loop":
            target.symlink_to(target)
        elif value == "file-as-parent":
            return str(self.source / "thesis.tex" / "x")
        elif value == "notes-dir":
            return str(self.dest)
        return str(target)

    def allow(self, value: str) -> None:
        """``value`` is a destination the user named: the command may write there (never into source/)."""
        path = Path(os.path.expanduser(value)) if value else self.cwd
        path = path if path.is_absolute() else self.cwd / path
        self.allowed.append(Path(os.path.abspath(path)))


@contextlib.contextmanager
def _sandbox():
    with tempfile.TemporaryDirectory(prefix="contract-") as folder:
        box = Sandbox(Path(folder).resolve())
        old_home = os.environ.get("HOME")
        os.environ["HOME"] = str(box.home)
        try:
            with contextlib.chdir(box.cwd):
                yield box
        finally:
            if old_home is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = old_home
            for folder_, dirs, _ in os.walk(folder):  # a case may leave a folder without permissions
                for name in dirs:
                    with contextlib.suppress(OSError):
                        os.chmod(os.path.join(folder_, name), 0o700)


def _check_contract(box: Sandbox, main, argv: list[str]) -> None:
    before = _snapshot(box.root, tuple(box.allowed))
    source_before = _snapshot(box.source)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = main(argv)  # an exception escaping here is a traceback: the test fails with it
    text = err.getvalue()
    assert "Traceback" not in text, (argv, text)
    assert status in EXIT_STATUSES, (argv, status, text)
    if status != 0:
        lines = text.splitlines()
        assert any(line.startswith("error: ") or ": error: " in line for line in lines), (argv, status, text)
    assert _snapshot(box.source) == source_before, ("the source tree changed", argv)
    after = _snapshot(box.root, tuple(box.allowed))
    assert after == before, ("written or removed outside the destination", argv,
                             sorted(set(after) ^ set(before)) or "content changed")
    assert (box.dest / "users-notes.txt").read_text() == "the user's file in the destination", argv


# ---------------------------------------------------------------- the trainer
TRAIN_FIELDS = {"--name": TEXT, "--base-lr": NUMBER, "--epochs": NUMBER, "--batch-size": NUMBER,
                "--num-classes": NUMBER, "--image-size": NUMBER, "--warmup-epochs": NUMBER, "--momentum": NUMBER,
                "--weight-decay": NUMBER, "--workers": NUMBER, "--seed": NUMBER, "--arch": TEXT, "--log-every": NUMBER,
                "--output-root": PATH, "--data-dir": PATH, "--stage-to": PATH, "--config": YAML}


@CASES
@given(field=st.sampled_from(sorted(TRAIN_FIELDS)), data=st.data())
def test_the_trainer_keeps_the_contract(field, data):
    from tutorial_lib.engine.trainer import main

    with _sandbox() as box:
        argv = ["--profile", "smoke", "--dataset", "imagefolder", "--data-dir", str(box.source),
                "--output-root", str(box.dest), "--name", "contract"]  # the source is no data set: never trains
        value = data.draw(TRAIN_FIELDS[field], label=field)
        if field == "--config":
            (box.root / "c.yaml").write_text(value)
            value = str(box.root / "c.yaml")
        elif isinstance(value, tuple):
            value = box.path(value)
        if field in ("--output-root", "--stage-to"):
            box.allow(value)
        _check_contract(box, main, [*argv, field, value])


# ---------------------------------------------------------------- evaluate
@CASES
@given(run_dir=PATH, model=st.sampled_from(TORCH_BYTES), data_dir=PATH, batch=NUMBER)
def test_evaluate_keeps_the_contract(run_dir, model, data_dir, batch):
    from tutorial_lib.engine.model_file import main

    with _sandbox() as box:
        run = box.path(run_dir)
        if run_dir == ("kind", "empty-dir"):
            (Path(run) / "model.pt").write_bytes(model)  # empty, torn, a pickle, JSON, zeros, noise
        _check_contract(box, main, [run, "--data-dir", box.path(data_dir), "--batch-size", batch,
                                    "--workers", "0", "--device", "cpu"])


# ---------------------------------------------------------------- the data tool
@CASES
@given(command=st.sampled_from(["detect", "prepare"]), source=PATH, dest=PATH, labels=PATH)
def test_the_data_tool_keeps_the_contract(command, source, dest, labels):
    from tutorial_lib.data.__main__ import main

    with _sandbox() as box:
        argv = [command, box.path(source)]
        if command == "prepare":
            target = box.path(dest)
            box.allow(target)
            argv += [target, "--no-progress", "--val-labels", box.path(labels)]
        _check_contract(box, main, argv)


# ---------------------------------------------------------------- rundir fresh
@CASES
@given(run_dir=PATH)
def test_rundir_fresh_never_removes_what_the_project_did_not_write(run_dir):
    from tutorial_lib.rundir.__main__ import main

    with _sandbox() as box:
        _check_contract(box, main, ["fresh", box.path(run_dir)])


# ---------------------------------------------------------------- the course runner
@CASES
@given(params=YAML, name=TEXT, value=YAML, out=PATH)
def test_the_course_runner_keeps_the_contract(params, name, value, out):
    from tutorial_lib.course import main

    with _sandbox() as box:
        (box.root / "params.yaml").write_text(params)
        target = box.path(out)
        box.allow(target)  # "--only 99" names no notebook: nothing is ever executed
        _check_contract(box, main, ["--params", str(box.root / "params.yaml"), "-p", name, value,
                                    "--out", target, "--only", "99"])


# ---------------------------------------------------------------- netlab (refused before anything is created)
BAD_NODES = st.one_of(st.sampled_from(["nan", "0", "-1", "255", "300", "1e3", "", "two"]),
                      st.integers().filter(lambda n: not 1 <= n <= 254).map(str))
BAD_RATE = st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "1e400", "2e6", "", "fast"]),
                     st.floats().filter(lambda r: not 0 <= r <= 1e6).map(repr))


@CASES
@given(nodes=BAD_NODES, rate=BAD_RATE, which=st.sampled_from(["nodes", "rate", "both"]))
def test_netlab_refuses_bad_settings_before_creating_anything(nodes, rate, which):
    from tutorial_lib.jobs.netlab import main

    argv = ["up", "--tag", "tlabcontract"]
    argv += ["--nodes", nodes] if which in ("nodes", "both") else ["--nodes", "0"]
    argv += ["--rate-mbit", rate] if which in ("rate", "both") else []
    with _sandbox() as box:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(argv) == 2, err.getvalue()
        assert "Traceback" not in err.getvalue() and "error: " in err.getvalue()
        assert not box.dest.joinpath("x").exists()


# ---------------------------------------------------------------- bench (the commands that read files)
@CASES
@given(command=st.sampled_from(["runs", "table"]), path=PATH, content=st.sampled_from(
    [b"", b'{"name": ', b"\xff\xfe", b"[]", b"null", b'{"kind": "trainer"}\n{"kind', b"1\n2\n"]))
def test_bench_keeps_the_contract_on_torn_files(command, path, content):
    from tutorial_lib.bench.cli import main

    with _sandbox() as box:
        target = box.path(path, content)
        if path == ("kind", "empty-dir"):
            for name in ("config.json", "metrics.jsonl"):
                (Path(target) / name).write_bytes(content)
        _check_contract(box, main, [command, target])


BAD_SIZES = ["0x5", "5", "axb", "-3x4", "", "500x", "x375", "1e3x2", "500 x 375x2"]


@CASES
@given(argv=st.one_of(
    st.integers(max_value=0).map(lambda n: ["extract", "--rounds", str(n)]),
    st.one_of(st.integers(max_value=0), st.integers(min_value=21)).map(lambda n: ["extract", "--classes", str(n)]),
    st.integers(max_value=0).map(lambda n: ["extract", "--per-class", str(n)]),
    st.sampled_from(BAD_SIZES).map(lambda text: ["extract", "--jpeg-size", text]),
    TEXT.filter(lambda text: text not in ("10k", "100k", "full")).map(lambda text: ["scale", "--files", text]),
    st.integers(max_value=0).map(lambda n: ["scale", "--rounds", str(n)]),
    TEXT.filter(lambda text: text.strip(", ") and not set(text.split(",")) <= {"prepare", "tar", "scan", "job",
                                                                              "stage"})
    .map(lambda text: ["scale", "--steps", text])))
def test_the_data_benchmarks_refuse_bad_values_before_they_write(argv):
    from tutorial_lib.bench.cli import main

    with _sandbox() as box:
        _check_contract(box, main, [*argv, "--work-dir", str(box.dest / "work")])
        assert not (box.dest / "work").exists(), argv
