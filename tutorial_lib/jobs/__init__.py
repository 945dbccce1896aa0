"""Submit training jobs to Slurm or to this machine, and follow them through a :class:`Job` handle.

    from tutorial_lib.engine.config import make_config
    from tutorial_lib import jobs
    job = jobs.submit(make_config("smoke", name="ddp2"), nodes=2, ranks_per_node=1)
    job.wait(); job.metrics("epoch")

Both backends run the same torchrun command (:func:`tutorial_lib.jobs.commands.torchrun_command`);
Slurm through ``cluster_scripts/train.sbatch``, whose per-node task builds it with
:mod:`tutorial_lib.jobs.launch`. The run directory holds ``job.json`` (:mod:`tutorial_lib.jobs.record`), so
``attach(run_dir)`` gives the handle back after a kernel restart. Every state comes from this process's one
watcher (:mod:`tutorial_lib.jobs.watch`), which asks Slurm once per interval for all jobs together.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from pathlib import Path

from tutorial_lib.engine.config import ConfigError, TrainConfig, shorten
from tutorial_lib.exits import one_line
from tutorial_lib.jobs import slurm
from tutorial_lib.jobs.commands import sbatch_command, spec_torchrun_command
from tutorial_lib.jobs.local import local_cancel, submit_local, supervisor_errors
from tutorial_lib.jobs.record import read_job_file
from tutorial_lib.jobs.site import Site, load_site
from tutorial_lib.jobs.slurm import slurm_available
from tutorial_lib.jobs.slurm_values import is_job_id
from tutorial_lib.jobs.spec import JobError, JobSpec, check_flags, check_seconds, make_spec
from tutorial_lib.jobs.states import FINAL_STATES, STATES, public, read_state
from tutorial_lib.jobs.sweep_plan import RENAMED_ARGUMENTS, sweep_plan
from tutorial_lib.jobs.watch import cluster_of, watcher
from tutorial_lib.paths import PATH_MAX, not_a_file, resolve_problem
from tutorial_lib.rundir.layout import JOB_FILE, JOB_LOG, STATE_FILE, SUPERVISOR_LOG, slurm_log
from tutorial_lib.rundir.lock import RunDirError, RunLock, prepare_run_dir
from tutorial_lib.rundir.metrics import metrics_table, read_metrics
from tutorial_lib.rundir.owned import clear_run_dir, clearable_files

__all__ = ["FINAL_STATES", "STATES", "Job", "JobError", "JobSpec", "Site", "attach", "choose_backend", "load_site",
           "sbatch_command", "slurm_available", "spec_torchrun_command", "submit", "sweep"]
# slurmstepd's words when a task's program is not there (e.g. a virtualenv only the login node has)
# srun's words for a program missing on a node, and bash's in the batch script (train.sbatch's port helper)
_MISSING_PROGRAM = re.compile(r"(?:execve\(\)|line \d+): (\S+?): No such file or directory")


def _path_text(value) -> str:
    """A path or record value for a message: whole up to 1,000 characters, cut beyond (a damaged record's id can be
    5,000: r43k)."""
    return str(value) if len(str(value)) <= 1000 else shorten(str(value), 300)


class Job:
    """Handle on a submitted training job: state, logs, metrics, wait and cancel."""

    def __init__(self, run_dir: str | os.PathLike):
        try:
            self._open(run_dir)
        except JobError as exc:  # a long path in it is cut in the middle: the field and the fix stay (r43g)
            raise JobError(one_line(str(exc))) from None
        watcher().register(self)  # followed from now on: the next query of its cluster includes it

    def _open(self, run_dir: str | os.PathLike) -> None:
        """Read the job record of ``run_dir``; JobError naming run_dir and the fix where it holds none."""
        if not isinstance(run_dir, (str, os.PathLike)) or not str(run_dir):
            raise JobError(f"run_dir: expected the path of a job's run directory, got {shorten(run_dir)} "
                           f"({type(run_dir).__name__}). Fix: pass output_root/name of a submitted job, e.g. "
                           "jobs.attach('runs/ddp2').")
        if "\x00" in os.fspath(run_dir):  # no path holds a NUL byte (Python: "embedded null byte")
            raise JobError(f"run_dir: {shorten(os.fspath(run_dir))} contains a NUL byte, which no path can hold. Fix: "
                           "pass output_root/name of a submitted job, e.g. jobs.attach('runs/ddp2').")
        if isinstance(os.fspath(run_dir), str) and len(os.fspath(run_dir)) > PATH_MAX:
            raise JobError(f"run_dir: {shorten(os.fspath(run_dir))} is longer than any path can be ({PATH_MAX} "
                           "characters). Fix: pass output_root/name of a submitted job, e.g. jobs.attach('runs/ddp2').")
        problem = resolve_problem(run_dir)  # a symbolic link loop
        if problem is not None:
            raise JobError(f"run_dir: {shorten(str(run_dir))} {problem[0]}. Fix: {problem[1]} (output_root/name of a "
                           "submitted job).")
        self.run_dir = Path(run_dir).expanduser().resolve()
        odd = not_a_file(self.run_dir / STATE_FILE)
        if odd is not None:  # a named pipe there would block every state read
            raise JobError(f"run_dir: {self.run_dir / STATE_FILE} is {odd}, not the state file a local job's "
                           "supervisor writes; nothing was read from it. Fix: move it away, or pass the run "
                           "directory of a submitted job.")
        self.record = read_job_file(self.run_dir)
        self.id: str = str(self.record["id"])
        self.backend: str = self.record["backend"]
        self.name: str = self.record["name"]

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, backend={self.backend!r}, state={self.state!r}, run_dir='{self.run_dir}')"

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """PENDING, RUNNING, UNKNOWN (the controller did not answer: not a verdict), COMPLETED, FAILED, CANCELLED or
        TIMEOUT, as this process's watcher last saw it."""
        return self.status()["state"]

    def status(self) -> dict:
        """The state plus what the watcher knows: ``watch`` (its own finer state: pending, running, completing,
        requeued, unknown...), ``source`` (who said so), ``exit_code``, ``reason``, ``slurm_state``, ``nodes``."""
        seen = watcher().status(self)
        status = {"state": public(seen.state), "watch": seen.state, "source": seen.source,
                  "exit_code": seen.exit_code, "reason": seen.reason}
        if seen.slurm_state is not None:
            status["slurm_state"] = seen.slurm_state
        if seen.fields.get("NodeList"):
            status["nodes"] = seen.fields["NodeList"]
        return status

    def queue_fields(self) -> dict:
        """What the scheduler last said about this job, in scontrol's words (JobState, Reason, NodeList,
        Restarts, ExitCode...), from the watcher's last query; empty for a local job or before any answer."""
        return dict(watcher().status(self, answered=True).fields)

    @property
    def exit_code(self) -> int | None:
        """The job's exit code once it has ended (None while it runs or if unknown)."""
        return self.status().get("exit_code")

    def done(self) -> bool:
        """True once the job has reached a final state."""
        return self.state in FINAL_STATES

    def wait(self, timeout: float | None = None, poll: float = 1.0, check: bool = True) -> str:
        """Block until the job ends (or ``timeout`` seconds pass); return its state.

        With ``check`` a job that ended in any state but COMPLETED raises JobError explaining why
        (state, exit code, log tail). A timeout returns the current state without raising.
        """
        check_seconds("timeout", timeout)
        check_seconds("poll", poll, allow_none=False, positive=True)  # r43q: 0 asked the scheduler without a pause
        check_flags(check=check)  # check="no" would be true (r43m)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status["state"] in FINAL_STATES:
                if check and status["state"] != "COMPLETED":
                    raise JobError(self.explain(status))
                return status["state"]
            if deadline is not None and time.monotonic() >= deadline:
                return status["state"]
            time.sleep(poll)

    def explain(self, status: dict | None = None) -> str:
        """A human explanation of how the job ended: state, exit code and the tail of its log (``status``: a
        :meth:`status` result, None for the job's status now)."""
        if status is not None and not (isinstance(status, dict) and status.get("state") in STATES):
            raise ConfigError(f"status: expected a dict from job.status() or None, got {shorten(status)}. Fix: call "
                              "job.explain() alone, or job.explain(job.status()).")
        status = status or self.status()
        causes = [line for line in self.logs().splitlines() if line.startswith(("error:", "Traceback"))
                  or "Error:" in line.split(" ", 1)[0]][:3]
        cause = "".join(f"\n  {line}" for line in causes)
        head = (f"job {_path_text(self.id)} ({_path_text(self.name)}, {self.backend}) ended {status['state']} with "
                f"exit code {status.get('exit_code')}.")
        if self.backend == "slurm" and not is_job_id(self.id):  # no log can exist: sbatch gave no job id
            return (f"{head} Its record has no Slurm job id, so no job ran: {status.get('reason')}. Fix: submit the "
                    "job again with the same settings (fresh=True if its run directory is damaged).")
        missing = _MISSING_PROGRAM.search(self.logs()) if self.backend == "slurm" else None
        if missing and status["state"] != "COMPLETED":
            return (f"{head} The compute nodes have no {missing.group(1)}: the Python command the job runs does not "
                    "exist there. Fix: give the site block a python that exists on the nodes and setup lines that "
                    "make it work (module load, venv activation; see README, Bringing the course to your cluster).")
        if status.get("slurm_state") == "NODE_FAIL":  # one line: nothing in the log says more
            return (f"{head} A node of the job was lost (Slurm: NODE_FAIL; nodes {status.get('nodes', '?')}); "
                    "the run directory keeps its last checkpoint. Fix: submit the job again with the same settings: "
                    "it resumes from that checkpoint.")
        if str(status.get("reason", "")).startswith(("lost:", "damaged:", "its supervisor failed:")):
            head += f" It was {status['reason']}." if status["reason"].startswith(("lost", "damaged")) else \
                f" {status['reason'][0].upper()}{status['reason'][1:]}."
            errors = supervisor_errors(self.run_dir) if self.backend == "local" else ""
            head += f"\nThe supervisor's own errors ({self.run_dir / SUPERVISOR_LOG}):\n{errors}" if errors else ""
        no_log = self.backend == "slurm" and not self._has_log()
        if no_log and status["state"] == "FAILED" and status.get("slurm_state", "FAILED") == "FAILED":
            return (f"{head} Slurm could not open its output file {_path_text(self.log_path)} (it does not exist), "
                    "so the batch script never ran and the exit code says nothing. Fix: make output_root a folder that "
                    "the compute nodes can reach and write, without '%' or '\\' in its path, and submit again.")
        last = next((e for e in reversed(self.events()) if e["event"] in ("start", "resume", "stop", "end")), {})
        if last.get("event") == "stop" and status["state"] != "COMPLETED":  # exit 75 (README: Exit statuses)
            head += (f" The run was stopped before its end ({last.get('reason')}) with a checkpoint saved. Fix: "
                     "submit it again with the same settings to resume.")
        return (f"{head}{' First error lines:' + cause if cause else ''}\n"
                f"Last lines of {_path_text(self.log_path)}:\n{self.logs(tail=20)}")

    # ----------------------------------------------------------- observation
    @property
    def log_path(self) -> Path:
        """The job's combined stdout/stderr log."""
        return self.run_dir / JOB_LOG if self.backend == "local" else slurm_log(self.run_dir, self.id)

    def _has_log(self) -> bool:
        """Whether the log is a file; False where its path cannot be looked at (a damaged record's 5,000-character
        Slurm id makes a name too long: r43k)."""
        try:
            return self.log_path.is_file()
        except OSError:
            return False

    def logs(self, tail: int | None = None) -> str:
        """The job's log text (the last ``tail`` lines if given)."""
        if tail is not None and (not isinstance(tail, int) or isinstance(tail, bool) or tail < 0):
            raise ConfigError(f"tail: expected a whole number of lines >= 0 or None, got {shorten(tail)}. Fix: e.g. "
                           "job.logs(tail=20).")
        if not self._has_log():
            return ""
        with open(self.log_path, errors="replace", newline="") as handle:
            # a progress bar redraws one line with carriage returns: keep what a terminal would show
            lines = [line.rstrip("\r").split("\r")[-1] for line in handle.read().split("\n")]
        return "\n".join(lines if tail is None else lines[-tail:] if tail else [])  # tail=0: no lines

    def metrics(self, event: str | None = None):
        """The run's metrics.jsonl as a pandas DataFrame (optionally one event kind: step, epoch...)."""
        if event is not None and not isinstance(event, str):
            raise ConfigError(f"event: expected an event kind such as 'step' or 'epoch', or None, got "
                              f"{shorten(event)}. Fix: e.g. job.metrics('epoch').")
        try:
            return metrics_table(self.run_dir, event)
        except ValueError as exc:  # an event no trainer writes, a log that is no file: said as the user's mistake
            raise ConfigError(str(exc)) from None

    def events(self) -> list[dict]:
        """The run's metrics.jsonl as a list of dicts."""
        return read_metrics(self.run_dir)

    # ---------------------------------------------------------------- control
    def cancel(self, wait: float = 60.0) -> str:
        """Cancel the job and wait (up to ``wait`` s) until it has ended; return its state.

        Only what the project can prove it started is signalled (a local supervisor by its recorded pid, start
        time and command line; a Slurm job whose batch script is this run directory's): a record without that
        proof is refused with a one-line JobError, and nothing is signalled."""
        check_seconds("wait", wait, allow_none=False)
        if self.backend == "local":
            ended = read_state(self.run_dir)
            if ended is not None and ended["state"] in FINAL_STATES:
                return self.state
            local_cancel(self.run_dir, self.record)
        else:
            watcher().refresh(self)
            seen = watcher().status(self)
            if seen.final:
                return public(seen.state)
            slurm.cancel_slurm(self.id, self.run_dir, cluster_of(self), seen)
        watcher().refresh(self)
        self.wait(timeout=wait, poll=0.5, check=False)
        return self.state


def attach(run_dir: str | os.PathLike) -> Job:
    """The Job of an existing run directory (after a kernel restart, or from another shell)."""
    return Job(run_dir)


# ---------------------------------------------------------------- backends
BACKENDS = ("auto", "local", "slurm")  # auto: Slurm where its controller answers, else this machine


def choose_backend(backend: str = "auto", verbose: bool = True) -> str:
    """Resolve ``auto`` to ``slurm`` or ``local``, saying which and why; check an explicit ``slurm``."""
    check_flags(verbose=verbose)  # r43ab: verbose='no' was true
    if backend not in BACKENDS:
        raise JobError(f"backend: unknown backend {shorten(backend)}. Fix: use 'auto', 'local' or 'slurm'.")
    if backend == "local":
        return "local"
    ok, why = slurm.slurm_available()
    if backend == "slurm" and not ok:
        raise JobError(f"backend='slurm' was asked for but Slurm is not usable: {why}. Fix: run on a cluster "
                       "login node, start the emulated cluster (make slurm-up), or use backend='local'.")
    chosen = "slurm" if ok else "local"
    if verbose and backend == "auto":
        print(f"backend: {chosen} ({why})")
    return chosen


# ------------------------------------------------------------------ submit
def submit(config: TrainConfig, nodes: int = 1, ranks_per_node: int = 1, backend: str = "auto",
           time: str | int | None = None, partition: str | None = None, account: str | None = None,
           sbatch_options=(), max_restarts: int = 0, after: Job | None = None, check_data: bool = True,
           fresh: bool = False, verbose: bool = True, module: str = "tutorial_lib.train",
           module_args: list[str] | None = None, site=None, **renamed) -> Job:
    """Validate and submit one training job; return its Job handle.

    ``ranks_per_node`` processes run on each of ``nodes`` nodes (one per GPU on a GPU cluster, CPU
    processes when the config's device is the CPU). ``backend``: ``auto`` (Slurm if it answers, else
    this machine), ``local`` or ``slurm``. ``after``: start only once that job has ended (sweeps measure
    one job at a time). ``site``: what the cluster needs (:class:`Site`, a ``site:`` mapping or a YAML
    file; None: the file named by ``$TUTORIAL_SITE``, if any); Slurm jobs only. ``partition`` and ``account``
    default to the site's; ``time`` to the site's too, which is also the longest a job may ask for
    (:func:`tutorial_lib.jobs.spec.job_time`; 00:30:00 where neither sets one).
    ``max_restarts``: torchrun restarts all ranks this many times if one dies (on both backends).
    ``fresh``: delete an earlier run of the same name first (otherwise the job resumes from it).
    ``module``/``module_args``: run another program on every rank instead of the trainer (e.g.
    ``"tutorial_lib.bench", ["allreduce", "--out", ...]``); the config then only names the run directory.
    Everything is checked before anything is submitted; errors name the field and the fix.

    Read top to bottom: the backend is chosen, :func:`make_spec` builds the validated JobSpec once, the run
    directory is taken for it, and the backend gets that spec (:mod:`.slurm` or :mod:`.local`, both building
    their command lines from it with :mod:`.commands`).
    """
    _refuse_unknown_arguments(renamed)
    check_flags(fresh=fresh, verbose=verbose)
    _check_after(after)
    chosen = choose_backend(backend, verbose)
    spec = _checked_spec(chosen, config, nodes=nodes, ranks_per_node=ranks_per_node, time=time, partition=partition,
                         account=account, sbatch_options=sbatch_options, max_restarts=max_restarts,
                         check_data=check_data, module=module, module_args=module_args, site=site)
    return _launch(spec, chosen, fresh, after, verbose)


def _check_after(after) -> None:
    if after is not None and not isinstance(after, Job):
        raise ConfigError(f"after: expected a Job (what submit() returns) or None, got {shorten(after)} "
                          f"({type(after).__name__}). Fix: pass the Job itself, e.g. after=first_job, or "
                          "jobs.attach(run_dir) for one submitted earlier.")


def _checked_spec(chosen: str, config: TrainConfig, **spec_args) -> JobSpec:
    """:func:`make_spec` for the ``chosen`` backend, and on Slurm the nodes' CPUs: everything but the run directory."""
    spec = make_spec(config, **spec_args, on_cluster=chosen == "slurm")
    if chosen == "slurm":
        slurm.check_node_cpus(spec)  # before the run directory is made (r43m: an empty one was left)
    return spec


def _launch(spec: JobSpec, chosen: str, fresh: bool, after: Job | None, verbose: bool) -> Job:
    """Take the run directory of a checked ``spec`` and hand the job to the ``chosen`` backend."""
    _take_run_dir(spec.run_dir, fresh)
    if chosen == "slurm":
        job_id = slurm.submit_slurm(spec, after.id if after is not None and after.backend == "slurm" else None)
    else:
        job_id = submit_local(spec, after.run_dir if after is not None else None)
    job = Job(spec.run_dir)
    watcher().submitted(job)
    if verbose:
        print(f"submitted {job.name}: job {job_id} on {chosen}, {spec.nodes} node(s) x {spec.ranks_per_node} "
              f"rank(s), run directory {job.run_dir}; {spec.time_note}")
    return job


def _refuse_unknown_arguments(renamed: dict, caller: str = "submit") -> None:
    """A renamed argument names its new name; any other unknown one is a TypeError, as Python's own."""
    for old, new in RENAMED_ARGUMENTS.items():
        if old in renamed:
            raise ConfigError(f"{old}: this argument was renamed {new}. Fix: pass {new}={renamed[old]!r}.")
    if renamed:
        raise TypeError(f"{caller}() got an unexpected keyword argument {next(iter(renamed))!r}")


def _check_run_dir(run_dir: Path, fresh: bool) -> None:
    """Refuse (ConfigError, JobError) a ``run_dir`` that a new job cannot take, writing nothing: not a usable
    folder, a live trainer or job in it, or with ``fresh`` a file there that the project did not write."""
    _run_dir_step(prepare_run_dir, run_dir, False)
    RunLock(run_dir).check()
    if (run_dir / JOB_FILE).exists():
        try:
            previous = Job(run_dir)
        except (JobError, ValueError):
            previous = None
        if previous is not None and not previous.done():
            raise JobError(f"run directory {run_dir} already has a live job {previous.id} "
                           f"({previous.state}). Fix: wait for it or cancel it, or choose another name.")
    if fresh:
        _run_dir_step(clearable_files, run_dir)


def _take_run_dir(run_dir: Path, fresh: bool) -> None:
    """Make ``run_dir`` ready for a new job (:func:`_check_run_dir`), emptied of the project's files first with
    ``fresh``; its RunDirError becomes the ConfigError that submit raises for bad input."""
    _check_run_dir(run_dir, fresh)
    if fresh:  # only the files this project wrote; refused, naming them, while anything else is there
        removed = _run_dir_step(clear_run_dir, run_dir)
        if removed:  # never silently: a notebook run outside the course replaces the course's run of that name
            print(f"replaced the earlier run in {run_dir}: removed its {len(removed)} file(s) (fresh=True; to keep "
                  "a run, give this one another output_root or name)", flush=True)
    _run_dir_step(prepare_run_dir, run_dir, True)


def _run_dir_step(function, *args):
    """``function(*args)``, its RunDirError turned into the ConfigError that submit raises for bad input."""
    try:
        return function(*args)
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None


def sweep(config: TrainConfig, over: str, values, sequential: bool = True, **submit_args) -> list[Job]:
    """Submit one job per value of ``over`` (``nodes``, ``ranks_per_node`` or a config field).

    Run names get a suffix such as ``-nodes2`` or ``-batch_size256``. With ``sequential`` each job
    starts when the previous one has ended, so throughput measurements do not share the machine.
    ``submit_args`` are :func:`submit`'s. Every job is checked before the first is submitted, its run directory
    too (a bad value or an unusable run directory: one ConfigError or JobError naming it, nothing submitted).
    """
    check_flags(sequential=sequential)
    planned = sweep_plan(config, over, values)
    arguments = _submit_arguments(config, submit_args)
    chosen = choose_backend(arguments.pop("backend"), arguments["verbose"])
    fresh, after, verbose = arguments.pop("fresh"), arguments.pop("after"), arguments.pop("verbose")
    # r43n: values=[16, 100000] ran the first job before the second was refused; r43p: so did a later job's run
    # directory holding a user's file. Every spec and run directory is checked first, then each is launched.
    specs = [_checked_spec(chosen, job_config, **{**arguments, **job_args}) for job_config, job_args in planned]
    for spec in specs:
        _check_run_dir(spec.run_dir, fresh)
    jobs: list[Job] = []
    for spec in specs:
        jobs.append(_launch(spec, chosen, fresh, jobs[-1] if sequential and jobs else after, verbose))
    return jobs


def _submit_arguments(config: TrainConfig, submit_args: dict) -> dict:
    """A sweep's ``submit_args`` checked as :func:`submit` checks its own, with submit's defaults filled in."""
    if "config" in submit_args:
        raise TypeError("sweep() got multiple values for argument 'config'")
    renamed = {key: value for key, value in submit_args.items() if key not in _SUBMIT_PARAMETERS}
    _refuse_unknown_arguments(renamed, "sweep")
    bound = inspect.signature(submit).bind_partial(config, **submit_args)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["config"], arguments["renamed"]
    check_flags(fresh=arguments["fresh"], verbose=arguments["verbose"])
    _check_after(arguments["after"])
    return arguments


_SUBMIT_PARAMETERS = set(inspect.signature(submit).parameters) - {"renamed"}
