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

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extras: pip install -e .[test]")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tutorial_lib.exits import EXIT_STATUSES  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]

CASES = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Strings a careless or hostile user types: control characters, newlines, shell words, long or unusual unicode.
# No NUL: a command line cannot hold one.
HOSTILE_WORDS = ["", " ", "\n", "a\nb", "run\n", "\t", "\x1b[31mred", "$(touch pwned)", "`touch pwned`",
                 "; rm -rf ~", "a|b", "../..", "..", ".", "~", "~/x", "$HOME", "-", "--", "x" * 4000, "ſ", "İ",
                 "\u202eevil", "名前", "\U0001f600", "\udcff", "-1", "nan", "z" * 100_000]
TEXT = st.one_of(st.sampled_from(HOSTILE_WORDS),
                 st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30))
NUMBER_WORDS = ["nan", "NaN", "inf", "-inf", "-1", "0", "-0", "1e308", "1e400", "99999999999999999999",
                "0x10", "1_000", "", " 1", "1.5", "true", "None", "1e-320"]
NUMBER = st.one_of(st.sampled_from(NUMBER_WORDS), st.floats().map(repr), st.integers().map(str))
NUMBER_OR_ANY = st.one_of(NUMBER, st.integers(-3, 5), st.booleans(), st.none(), st.floats(), st.lists(st.integers(),
                                                                                                     max_size=2))
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
        for line in (line for line in lines if line.startswith("error: ")):  # ours: the field, the fix, cut short
            assert "Fix" in line and len(line) < 2100, (argv[:3], line[:500])
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


# ---------------------------------------------------------------- param_server (checked before any process starts)
PARAM_SERVER_FLAGS = ["--workers", "--steps", "--batch", "--lr", "--seed", "--staleness", "--straggler-delay",
                      "--straggler-prob"]


@CASES
@given(flag=st.sampled_from(PARAM_SERVER_FLAGS), value=NUMBER, path=PATH)
def test_param_server_keeps_the_contract(flag, value, path, monkeypatch):
    """Every setting and the ``--json`` file are checked before the experiment starts its processes (here it is
    replaced: a run that gets that far starts none)."""
    import tutorial_lib.param_server.__main__ as command

    monkeypatch.setattr(command, "run_experiment", lambda cfg, staleness, allreduce: {})
    with _sandbox() as box:
        target = box.path(path, b'{"run": "ps_s0", "mode": "parameter_server", "staleness_bound": 0}\n')
        box.allow(target)
        _check_contract(box, command.main, ["--steps", "2", f"{flag}={value}", "--json", target])


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


# ================================================================ issue 43: what no parser checked before
# Each example below checks a value, never runs the work it would start: per-example work stays cheap.
ONE_LINE_ERRORS = (ValueError, RuntimeError)  # ConfigError, DataError, JobError, CheckpointError... (one line each)


def _one_line_refusal(exc: BaseException, *fields: str) -> str:
    """The message of a refusal, checked: one line, a field named first, a fix."""
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text[:500]
    assert "Fix" in text, text[:500]
    if fields:
        assert text.startswith(fields) or any(f"{field}:" in text for field in fields), (fields, text[:300])
    return text


# ---------------------------------------------------------------- every site: field, make_spec and the pre-flight
_SLURM_TIME = re.compile(r"(\d{1,3})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|(\d{1,4}):(\d{1,2}):(\d{1,2})"
                         r"|(\d{1,6})(?::(\d{1,2}))?")


def _slurm_reads_as_written(text: str) -> bool:
    """An independent reading of sbatch(1)'s time forms: each field after the first within its range."""
    match = _SLURM_TIME.fullmatch(text)
    if match is None:
        return False
    d, dh, dm, ds, h, m, s, lead, lead_s = match.groups()
    limits = [(dh, 24), (dm, 60), (ds, 60), (m, 60), (s, 60), (lead_s, 60)]
    return all(value is None or int(value) < limit for value, limit in limits)


SLURM_TIMES = st.one_of(st.sampled_from(["99:99:99", "1-99:99:99", "00:60:00", "1-24", "10:75", "1-00:00:60", "30",
                                         "1:00:00", "1-02", "1-02:30", "2-00:00:10", "0", "1440", "UNLIMITED",
                                         "00:1671:00", "-1", " 10", "10\n"]),
                        st.tuples(st.integers(0, 120), st.integers(0, 120), st.integers(0, 120))
                        .map(lambda t: f"{t[0]}:{t[1]:02d}:{t[2]:02d}"),
                        st.tuples(st.integers(0, 9), st.integers(0, 40), st.integers(0, 90))
                        .map(lambda t: f"{t[0]}-{t[1]}:{t[2]:02d}"))
SITE_VALUES = {
    "partition": TEXT, "account": TEXT, "qos": TEXT, "time": st.one_of(SLURM_TIMES, TEXT),
    "cpus_per_rank": st.one_of(st.integers(-3, 2000), NUMBER, st.booleans()),
    "mem": st.one_of(TEXT, st.sampled_from(["64G", "0", "1T", "-1G", "1.5G", "64GB"])),
    "gpu_request": st.one_of(TEXT, st.sampled_from(["gres", "gpus-per-node"])),
    "setup": st.one_of(TEXT, st.lists(TEXT, max_size=3)),
    "python": st.one_of(TEXT, st.sampled_from(["-c", "--version", "-m", "python3", "/opt/venv/bin/python",
                                               "python3 -c x", "./py", "~/venv/bin/python"])),
    "env": st.one_of(TEXT, st.dictionaries(TEXT, st.one_of(TEXT, NUMBER), max_size=2)),
    "container": st.one_of(TEXT, st.fixed_dictionaries({"image": TEXT}, optional={
        "runtime": TEXT, "binds": st.lists(TEXT, max_size=2)})),
    "sbatch_options": st.one_of(TEXT, st.lists(st.one_of(TEXT, st.sampled_from([
        "--signal=B:USR1@99999", "--signal=B:USR1@65535", "--signal=USR1@60", "--outp=x", "--exclusive",
        "--constraint=a100", "--time-min=10"])), max_size=2)),
}


def _accepted_site_is_sound(site) -> None:
    """What a site block that was accepted may hold (an oracle independent of site.py's patterns)."""
    if site.python is not None:
        assert not site.python.startswith("-") and site.python.isprintable() and " " not in site.python
    if site.time is not None:
        assert _slurm_reads_as_written(site.time), site.time
    for word in (site.partition, site.account, site.qos):
        assert word is None or re.fullmatch(r"[A-Za-z0-9_.-]+", word)
    for option in site.sbatch_options:
        assert "\n" not in option and not re.fullmatch(r"--signal=B:USR1@\d+", option) or int(
            option.rsplit("@", 1)[1]) <= 65535
    assert all(line.isprintable() for line in site.setup)
    assert all(name.isidentifier() and value.isprintable() for name, value in site.env)


@CASES
@given(key=st.sampled_from(sorted(SITE_VALUES)), data=st.data())
def test_every_site_field_keeps_the_contract_through_make_spec_and_the_preflight(key, data, monkeypatch):
    from tutorial_lib import jobs
    from tutorial_lib.engine.config import ConfigError, make_config
    from tutorial_lib.jobs import preflight
    from tutorial_lib.jobs.commands import batch_script
    from tutorial_lib.jobs.spec import make_spec

    value = data.draw(SITE_VALUES[key], label=key)
    site = {"partition": "compute", "time": "04:00:00", key: value}
    monkeypatch.setattr(jobs, "choose_backend", lambda backend, verbose=True: "slurm")
    monkeypatch.setattr(jobs.slurm, "submit_slurm", lambda *a, **k: (_ for _ in ()).throw(jobs.JobError("stub")))
    monkeypatch.setattr(jobs.slurm, "partition_cpus", lambda partition: None)  # no cluster's sinfo asked
    with _sandbox() as box:
        cfg = make_config("smoke", name="site", output_root=str(box.dest))
        try:
            spec = make_spec(cfg, site=site, on_cluster=True, check_data=False)
        except ConfigError as exc:
            _one_line_refusal(exc, f"site.{key}", "site:", "time")
            with pytest.raises(ConfigError):  # the pre-flight refuses it the same way, before submitting
                preflight.run(cfg, backend="slurm", site=site)
        else:
            _accepted_site_is_sound(spec.site)
            script = batch_script(spec)
            assert subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode == 0
            report = preflight.run(cfg, backend="slurm", site=site)
            assert str(report) == "FAIL  scheduler accepts the job: stub", str(report)  # reached sbatch, no further
        assert not box.cwd.joinpath("pwned").exists() and not box.home.joinpath("pwned").exists()


# ---------------------------------------------------------------- the jobs API's arguments
JOB_ARGS = {"nodes": NUMBER_OR_ANY, "ranks_per_node": NUMBER_OR_ANY, "max_restarts": NUMBER_OR_ANY,
            "time": st.one_of(SLURM_TIMES, TEXT, st.integers(-5, 10**7)), "partition": TEXT, "account": TEXT,
            "sbatch_options": st.one_of(TEXT, st.lists(TEXT, max_size=2), st.integers()),
            "module": st.one_of(TEXT, st.sampled_from(["tutorial_lib.bench", "os"])),
            "module_args": st.one_of(TEXT, st.integers(), st.lists(st.one_of(TEXT, st.integers()), max_size=3)),
            "site": st.one_of(TEXT, st.integers(), st.lists(st.integers(), max_size=2), st.dictionaries(TEXT, TEXT,
                                                                                                      max_size=1))}


@CASES
@given(key=st.sampled_from(sorted(JOB_ARGS)), data=st.data())
def test_the_jobs_api_keeps_the_contract_on_every_argument(key, data):
    from tutorial_lib.engine.config import ConfigError, make_config
    from tutorial_lib.jobs.spec import make_spec

    value = data.draw(JOB_ARGS[key], label=key)
    with _sandbox() as box:
        cfg = make_config("smoke", name="api", output_root=str(box.dest))
        try:
            spec = make_spec(cfg, check_data=False, on_cluster=True, **{"site": {"partition": "compute"}, key: value})
        except ConfigError as exc:
            _one_line_refusal(exc)
        else:  # accepted: counts are whole numbers at their minimum, the time is one Slurm reads as written
            assert all(isinstance(n, int) and not isinstance(n, bool) for n in (spec.nodes, spec.ranks_per_node))
            assert spec.nodes >= 1 and spec.ranks_per_node >= 1 and spec.max_restarts >= 0
            assert _slurm_reads_as_written(spec.time), spec.time
            assert spec.module_args is None or all(isinstance(a, str) and "\n" not in a for a in spec.module_args)
        assert [p.name for p in box.dest.iterdir()] == ["users-notes.txt"]  # make_spec writes nothing


@CASES
@given(over=st.one_of(TEXT, st.sampled_from(["nodes", "ranks_per_node", "batch_size", "name", "precision", "seed"])),
       values=st.one_of(st.none(), TEXT, st.integers(), st.lists(st.one_of(NUMBER, st.integers(-2, 4)), max_size=3)))
def test_sweep_checks_every_value_before_submitting_any(over, values, monkeypatch):
    from tutorial_lib import jobs
    from tutorial_lib.engine.config import ConfigError, make_config

    submitted = []
    monkeypatch.setattr(jobs, "_launch", lambda spec, *args: submitted.append((spec.config, args)))
    with _sandbox() as box:
        cfg = make_config("smoke", name="sw", output_root=str(box.dest))
        try:
            jobs.sweep(cfg, over=over, values=values, backend="local")
        except ConfigError as exc:
            _one_line_refusal(exc)
            assert submitted == []  # nothing submitted before the refusal
        else:
            assert len(submitted) == len(values) and all(c.name.startswith("sw-") for c, _ in submitted)


# ---------------------------------------------------------------- every bench subcommand's flags
def _bench_flags() -> list[tuple[str, str]]:
    from tutorial_lib.bench.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted((command, option) for command, parser in subparsers.choices.items()
                  for action in parser._actions for option in action.option_strings[-1:]
                  if option.startswith("--") and option != "--help" and action.nargs != 0)


BENCH_FLAGS = _bench_flags()
BENCH_VALUES = st.one_of(NUMBER, TEXT, st.sampled_from(["0", "-1", "100000", "100000x100000", "0x5", "x;y", "1,-1",
                                                         "os.system", "cuda", "fp64", "1e400", "2,0", "", "5", "21",
                                                         "tpu", "cpu,x", "jpeg,x", "pack,tar", "1000000000"]))
# What each subcommand's closed-set flags may hold, and its counts' least and largest values: an accepted value
# outside them would fail inside the command, after the check (shards --sets, e2e --input-pipeline).
BENCH_CHOICES = {("shards", "sets"): {"jpeg", "10k", "100k", "full"},
                 ("shards", "steps"): {"pack", "stage", "load", "first_step"},
                 ("scale", "steps"): {"prepare", "tar", "scan", "job", "stage"},
                 ("scale", "forms"): {"kaggle", "flat_val", "folders", "archives"},
                 ("scale", "files"): {"10k", "100k", "full"}, ("e2e", "input_pipeline"): {"cpu", "gpu"}}
BENCH_RANGES = {("shards", "jpeg_images"): (40, None), ("extract", "classes"): (1, 20), ("prepare", "classes"): (1, 20)}


def _bench_accepts_soundly(argv: list[str], monkeypatch) -> None:
    """``python -m tutorial_lib.bench ARGV`` is refused in one line before anything is written, or accepted with
    sound values (the command itself is not run: ``run_command`` is replaced)."""
    from tutorial_lib.bench import cli

    accepted = []
    monkeypatch.setattr(cli, "run_command", lambda args: accepted.append(args) or 0)
    with _sandbox() as box:
        _check_contract(box, cli.main, argv)
    command = argv[0]
    for args in accepted:
        for name, parsed in vars(args).items():
            for item in parsed if isinstance(parsed, list) else [parsed]:
                if isinstance(item, float):
                    assert math.isfinite(item) and item >= 0, (argv, name, item)
                elif isinstance(item, int) and not isinstance(item, bool):
                    assert item >= 0, (argv, name, item)
        if getattr(args, "device", None) is not None:
            assert args.device in ("auto", "cpu", "cuda")
        for (name, field), allowed in BENCH_CHOICES.items():
            given = getattr(args, field) if name == command else None
            assert given is None or ({given} if isinstance(given, str) else set(given)) <= allowed, (argv, given)
        for (name, field), (low, high) in BENCH_RANGES.items():
            given = getattr(args, field) if name == command else None
            assert given is None or low <= given <= (high or given), (argv, given)


@CASES
@given(flag=st.sampled_from(BENCH_FLAGS), value=BENCH_VALUES)
def test_every_bench_flag_keeps_the_contract(flag, value, monkeypatch):
    """Every flag of every bench subcommand, with a generated value: refused in one line before anything is
    written, or accepted with a sound value."""
    command, option = flag
    _bench_accepts_soundly([command, *(["x"] if command in ("runs", "table") else []), option, value], monkeypatch)


@settings(CASES, max_examples=20)
@given(flag=st.sampled_from(sorted(BENCH_CHOICES) + sorted(BENCH_RANGES)), data=st.data())
def test_the_bench_flags_checked_inside_a_command_are_checked_before_it(flag, data, monkeypatch):
    """The flags a subcommand's own code checked (``shards --sets``, ``e2e --input-pipeline``, ``--jpeg-images``,
    ``extract --classes``), with values near their sets and bounds: checked with the others, up front."""
    command, field = flag
    if flag in BENCH_CHOICES:
        words = st.sampled_from(sorted(BENCH_CHOICES[flag]) + ["x;y", "tpu", "", "JPEG"])
        value = ",".join(data.draw(st.lists(words, min_size=1, max_size=3)))
    else:
        value = str(data.draw(st.integers(-2, 50)))
    _bench_accepts_soundly([command, f"--{field.replace('_', '-')}", value], monkeypatch)


# ---------------------------------------------------------------- the records the project reads back
def _mutations(content: bytes):
    """Strategies of a record's damage: random bytes, a truncation, and (JSON) a field of another type."""
    wrong = st.sampled_from([None, "x", -1, 1.5, [], {}, [1, 2], {"a": 1}, True, "nan", 10**30])
    cut = st.integers(0, max(len(content) - 1, 0)).map(lambda n: ("truncated", content[:n]))
    noise = st.binary(max_size=300).map(lambda b: ("bytes", b))
    return st.one_of(cut, noise, wrong.map(lambda w: ("wrong", w)))


def _retyped(record, rng_choice, wrong):
    """``record`` (a JSON value) with one value, chosen by ``rng_choice``, replaced by ``wrong``."""
    if isinstance(record, dict) and record:
        key = sorted(record)[rng_choice % len(record)]
        return {**record, key: wrong}
    if isinstance(record, list) and record:
        copy = list(record)
        copy[rng_choice % len(copy)] = wrong
        return copy
    return wrong


JOB_RECORD = {"id": "12", "backend": "local", "name": "run", "spec": {"nodes": 1, "ranks_per_node": 1},
              "supervisor_pid": 1, "command": ["python"]}
METRICS = [{"event": "start", "time": 1.0, "global_batch": 8}, {"event": "step", "time": 2.0, "epoch": 1, "step": 5,
           "loss": 2.3, "lr": 0.1, "images_per_sec": 100.0}, {"event": "step", "time": 3.0, "epoch": 1, "step": 10,
           "loss": 2.1, "lr": 0.1, "images_per_sec": 120.0}, {"event": "epoch", "time": 4.0, "epoch": 1, "top1": 50.0}]


@CASES
@given(damage=_mutations(json.dumps(JOB_RECORD).encode()), which=st.integers(0, 50))
def test_a_damaged_job_record_is_one_line_in_attach(damage, which):
    from tutorial_lib.jobs import JobError, attach

    kind, value = damage
    with _sandbox() as box:
        content = json.dumps(_retyped(JOB_RECORD, which, value)).encode() if kind == "wrong" else value
        (box.dest / "job.json").write_bytes(content)
        try:
            job = attach(box.dest)
        except JobError as exc:
            _one_line_refusal(exc)
        else:
            assert isinstance(job.id, str) and job.backend in ("local", "slurm") and isinstance(job.name, str)


@CASES
@given(damage=_mutations("\n".join(json.dumps(e) for e in METRICS).encode()), which=st.integers(0, 50),
       line=st.integers(0, 3))
def test_a_damaged_metrics_file_keeps_the_contract_in_its_readers(damage, which, line):
    from tutorial_lib.bench.cli import main
    from tutorial_lib.rundir.metrics import read_metrics

    kind, value = damage
    with _sandbox() as box:
        events = [_retyped(e, which, value) if i == line else e for i, e in enumerate(METRICS)]
        content = "\n".join(json.dumps(e) for e in events).encode() if kind == "wrong" else value
        (box.dest / "metrics.jsonl").write_bytes(content)
        (box.dest / "config.json").write_text(json.dumps({"name": "run", "arch": "resnet18"}))
        for event in read_metrics(box.dest):
            assert isinstance(event["event"], str)
        _check_contract(box, main, ["runs", str(box.dest)])


@CASES
@given(damage=_mutations(b'{"made_by": "prepare", "source": "S", "form": "kaggle", "complete": false}'),
       which=st.integers(0, 50))
def test_a_damaged_prepared_mark_is_one_line(damage, which, fake_sources):
    """The mark ``prepare`` leaves in DEST, damaged: prepare again is refused in one line (or resumes), evaluate and
    the trainer's moved-source check read it without a traceback."""
    from tutorial_lib.data.__main__ import main
    from tutorial_lib.data.links import MARK, moved_source

    kind, value = damage
    source = fake_sources["kaggle"]
    with _sandbox() as box:
        mark = {"made_by": "prepare", "source": str(source), "form": "kaggle", "complete": False}
        content = json.dumps(_retyped(mark, which, value)).encode() if kind == "wrong" else value
        (box.dest / "users-notes.txt").unlink()  # DEST: a prepare of ours, with a damaged mark
        (box.dest / MARK).write_bytes(content)
        assert moved_source(box.dest) is None or "Fix" in moved_source(box.dest)
        before = _snapshot(source)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(["prepare", str(source), str(box.dest), "--no-progress"])
        assert "Traceback" not in err.getvalue() and status in (0, 2), err.getvalue()
        assert status == 0 or err.getvalue().startswith("error: DEST: "), err.getvalue()
        assert _snapshot(source) == before


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory) -> Path:
    """Two classes of 8 training images and 1 validation image each (8 px): runs and evaluations in seconds."""
    from tests.conftest import write_image_tree

    root = tmp_path_factory.mktemp("contract-data")
    write_image_tree(root, {"train": {"a": 8, "b": 8}, "val": {"a": 1, "b": 1}})
    return root


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_tree):
    """One tiny finished run (its model.pt) and a checkpoint of it, made once for the record tests."""
    from tutorial_lib.engine.config import make_config
    from tutorial_lib.engine.trainer import train

    out = tmp_path_factory.mktemp("contract-run")
    cfg = make_config("smoke", name="base", output_root=str(out), dataset="imagefolder", data_dir=str(tiny_tree),
                      image_size=16, batch_size=8, epochs=1, max_steps_per_epoch=2, progress=False)
    train(cfg)
    return out / "base"


def _damaged_torch_file(good: bytes, kind: str, cut: float, noise: bytes, which: int, wrong, inner: str) -> bytes:
    """A torch file the project wrote (``good``), damaged: ``bytes`` (noise instead), ``truncated`` (cut at the
    fraction ``cut``), ``wrong`` (an entry of another type) or else one value inside its ``inner`` entry."""
    import torch

    if kind == "bytes":
        return noise
    if kind == "truncated":
        return good[:int(len(good) * cut)]
    saved = torch.load(io.BytesIO(good), weights_only=True)
    if kind == "wrong":
        saved = _retyped(saved, which, wrong)
    else:
        saved[inner] = _retyped(saved[inner], which, wrong)
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    return buffer.getvalue()


TORCH_WRONG = st.sampled_from([None, "x", -1, 1.5, [], {}, [1, 2], {"a": 1}, True, "os.system", 10**30])


@settings(max_examples=15, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["bytes", "truncated", "wrong", "inner"]), cut=st.floats(0, 1),
       noise=st.binary(max_size=200), which=st.integers(0, 50), wrong=TORCH_WRONG)
def test_a_damaged_model_file_is_one_line_in_evaluate(kind, cut, noise, which, wrong, finished_run, tiny_tree):
    from tutorial_lib.engine.model_file import main

    good = (finished_run / "model.pt").read_bytes()
    with _sandbox() as box:
        run = box.dest / "run"
        run.mkdir()
        (run / "model.pt").write_bytes(_damaged_torch_file(good, kind, cut, noise, which, wrong, "state_dict"))
        _check_contract(box, main, [str(run), "--data-dir", str(tiny_tree), "--workers", "0", "--device", "cpu",
                                    "--batch-size", "64"])


@settings(max_examples=10, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["bytes", "truncated", "wrong", "inner"]), cut=st.floats(0, 1),
       noise=st.binary(max_size=200), which=st.integers(0, 50), wrong=TORCH_WRONG)
def test_a_damaged_checkpoint_is_one_line_when_the_trainer_resumes(kind, cut, noise, which, wrong, finished_run,
                                                                   tiny_tree):
    from tutorial_lib.engine.trainer import main

    good = (finished_run / "checkpoint.pt").read_bytes()
    with _sandbox() as box:
        run = box.dest / "base"
        shutil.copytree(finished_run, run)
        (run / "DONE").unlink()
        (run / "checkpoint.pt").write_bytes(_damaged_torch_file(good, kind, cut, noise, which, wrong, "progress"))
        argv = ["--profile", "smoke", "--name", "base", "--output-root", str(box.dest), "--dataset", "imagefolder",
                "--data-dir", str(tiny_tree), "--image-size", "16", "--batch-size", "8", "--epochs", "2",
                "--max-steps-per-epoch", "2", "--progress", "false"]
        _check_contract(box, main, argv)


# ---------------------------------------------------------------- notebook parameters (papermill)
def _notebook_values():
    from tests.test_params import NOTEBOOKS, defaults

    return [(notebook, name) for notebook in NOTEBOOKS for name in sorted(defaults(notebook))]


NOTEBOOK_PARAMETERS = _notebook_values()
PARAMETER_VALUES = st.one_of(NUMBER, TEXT, st.sampled_from([None, -1, 0, 10**9, 1.5, [1], [], ["a"], {"a": 1}, True, "",
                                                            float("nan")]))


@pytest.fixture(scope="module")
def course_root(tmp_path_factory):
    """An empty working directory: the notebooks' default data_dirs are digits exports still to be made there."""
    return tmp_path_factory.mktemp("course-root")


@CASES
@given(which=st.sampled_from(NOTEBOOK_PARAMETERS), value=PARAMETER_VALUES)
def test_a_notebook_parameter_is_checked_by_the_first_cell_and_the_plan(which, value, course_root):
    """A value papermill injects (``-p name value``, its cell as papermill writes it) is checked by the notebook's
    first cell (:func:`tutorial_lib.course.check_injected_parameters`: the kind of the default, finite, not
    negative), then by the notebook's plan: refused in one line naming the parameter, never a traceback."""
    from papermill.translators import PythonTranslator

    from tests.test_params import check, defaults, parameters_source, values_for
    from tutorial_lib.course import check_injected_parameters

    notebook, name = which
    injected = "# Parameters\n" + PythonTranslator.codify({name: value})
    try:
        check_injected_parameters([parameters_source(notebook), injected])
    except ValueError as exc:
        assert _one_line_refusal(exc).startswith(f"parameters: {name} "), str(exc)[:300]
        return
    default = defaults(notebook)[name]
    if default is not None:  # accepted: a value of its default's kind (a number for a number, text for text...)
        assert isinstance(value, bool) == isinstance(default, bool), (name, default, value)
        kind = (int, float) if isinstance(default, (int, float)) else (list, tuple) if isinstance(default, list) \
            else type(default)
        assert isinstance(value, kind), (name, default, value)
        assert not isinstance(value, float) or math.isfinite(value), (name, value)
    with contextlib.chdir(course_root):
        values = {**values_for(notebook, None), name: value}
        try:
            check(notebook, values, gpus=1)
        except ONE_LINE_ERRORS as exc:
            assert type(exc).__name__ in ("ConfigError", "DataError", "JobError", "PrepareError", "StagingError"), \
                (name, value, type(exc).__name__, str(exc)[:300])
            _one_line_refusal(exc)


def test_a_bad_parameter_in_a_real_papermill_run_is_one_line(tmp_path):
    """A parameter of the wrong kind for notebook 00: the course runner refuses it before papermill starts (the same
    check the notebook's first cell makes, :func:`check_injected_parameters`) in one line naming the notebook and
    the parameter (exit 2), no traceback, nothing written."""
    from tutorial_lib.course import main

    status, err = _main_status(main, ["--only", "00", "-p", "image_size", "-4", "--out", str(tmp_path / "out")])
    assert status == 2 and "Traceback" not in err and not (tmp_path / "out").exists(), err[-2000:]
    line, = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "00_setup" in line and "image_size" in line and "Fix" in line, line


def _main_status(main, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    return status, err.getvalue()
