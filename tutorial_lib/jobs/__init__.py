"""Submit training jobs to Slurm or to this machine, and follow them through a :class:`Job` handle.

    from tutorial_lib.engine.config import make_config
    from tutorial_lib import jobs
    job = jobs.submit(make_config("smoke", name="ddp2"), nodes=2, gpus_per_node=1)
    job.wait(); job.metrics("epoch")

Both backends run the same torchrun command (see :func:`tutorial_lib.jobs.spec.torchrun_command`);
Slurm through ``cluster_scripts/train.sbatch``. The run directory holds ``job.json``, so
``attach(run_dir)`` gives the handle back after a kernel restart.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tutorial_lib import REPO_ROOT
from tutorial_lib.engine.config import ConfigError, TrainConfig
from tutorial_lib.jobs.spec import (
    JobError,
    JobSpec,
    absolute_config,
    make_spec,
    read_job_file,
    torchrun_command,
    write_job_file,
)
from tutorial_lib.jobs.supervisor import FINAL_STATES, STATE_FILE, read_state
from tutorial_lib.rundir.lock import RunDirError, RunLock, pid_alive, prepare_run_dir
from tutorial_lib.rundir.metrics import metrics_table, read_metrics

SBATCH_SCRIPT = REPO_ROOT / "cluster_scripts" / "train.sbatch"
STATES = ("PENDING", "RUNNING", *FINAL_STATES)
_SLURM_STATE_MAP = {"CONFIGURING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING",
                    "REQUEUE_FED": "PENDING", "RESIZING": "RUNNING", "COMPLETING": "RUNNING",
                    "SUSPENDED": "RUNNING", "STOPPED": "RUNNING", "SIGNALING": "RUNNING",
                    "STAGE_OUT": "RUNNING", "PREEMPTED": "PENDING", "NODE_FAIL": "FAILED",
                    "BOOT_FAIL": "FAILED", "DEADLINE": "TIMEOUT", "OUT_OF_MEMORY": "FAILED",
                    "SPECIAL_EXIT": "FAILED", "REVOKED": "CANCELLED"}


class Job:
    """Handle on a submitted training job: state, logs, metrics, wait and cancel."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir).resolve()
        self.record = read_job_file(self.run_dir)
        self.id: str = str(self.record["id"])
        self.backend: str = self.record["backend"]
        self.name: str = self.record["name"]

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, backend={self.backend!r}, state={self.state!r}, run_dir='{self.run_dir}')"

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or TIMEOUT."""
        return self.status()["state"]

    def status(self) -> dict:
        """State plus exit code (when known) as a dict."""
        if self.backend == "local":
            return _local_status(self.run_dir)
        return _slurm_status(self.id, self.run_dir)

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
        """A human explanation of how the job ended: state, exit code and the tail of its log."""
        status = status or self.status()
        causes = [line for line in self.logs().splitlines() if line.startswith(("error:", "Traceback"))
                  or "Error:" in line.split(" ", 1)[0]][:3]
        cause = "".join(f"\n  {line}" for line in causes)
        head = (f"job {self.id} ({self.name}, {self.backend}) ended {status['state']} with exit code "
                f"{status.get('exit_code')}.")
        no_log = self.backend == "slurm" and not self.log_path.is_file()
        if no_log and status["state"] == "FAILED" and status.get("slurm_state", "FAILED") == "FAILED":
            return (f"{head} Slurm could not open its output file {self.log_path} (it does not exist), so the batch "
                    "script never ran and the exit code says nothing. Fix: make output_root a folder that the "
                    "compute nodes can reach and write, without '%' or '\\' in its path, and submit again.")
        return (f"{head}{' First error lines:' + cause if cause else ''}\n"
                f"Last lines of {self.log_path}:\n{self.logs(tail=20)}")

    # ----------------------------------------------------------- observation
    @property
    def log_path(self) -> Path:
        """The job's combined stdout/stderr log."""
        if self.backend == "local":
            return self.run_dir / "job.log"
        return self.run_dir / f"slurm-{self.id}.out"

    def logs(self, tail: int | None = None) -> str:
        """The job's log text (the last ``tail`` lines if given)."""
        if not self.log_path.is_file():
            return ""
        with open(self.log_path, errors="replace", newline="") as handle:
            # a progress bar redraws one line with carriage returns: keep what a terminal would show
            lines = [line.rstrip("\r").split("\r")[-1] for line in handle.read().split("\n")]
        return "\n".join(lines[-tail:] if tail else lines)

    def metrics(self, event: str | None = None):
        """The run's metrics.jsonl as a pandas DataFrame (optionally one event kind: step, epoch...)."""
        return metrics_table(self.run_dir, event)

    def events(self) -> list[dict]:
        """The run's metrics.jsonl as a list of dicts."""
        return read_metrics(self.run_dir)

    # ---------------------------------------------------------------- control
    def cancel(self, wait: float = 60.0) -> str:
        """Cancel the job and wait (up to ``wait`` s) until it has ended; return its state."""
        if self.done():
            return self.state
        if self.backend == "local":
            _local_cancel(self.run_dir)
        else:
            _run(["scancel", self.id], "scancel")
        self.wait(timeout=wait, poll=0.5, check=False)
        return self.state


def attach(run_dir: str | os.PathLike) -> Job:
    """The Job of an existing run directory (after a kernel restart, or from another shell)."""
    return Job(run_dir)


# ---------------------------------------------------------------- backends
def slurm_available() -> tuple[bool, str]:
    """Whether a Slurm controller answers here, and why (not)."""
    if shutil.which("sbatch") is None:
        return False, "sbatch is not on the PATH"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`scontrol ping` failed: {exc}"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        answer = ping.stdout.strip() or ping.stderr.strip()
        return False, f"the Slurm controller does not answer (`scontrol ping`: {answer})"
    return True, "sbatch is on the PATH and the Slurm controller answers"


def choose_backend(backend: str = "auto", verbose: bool = True) -> str:
    """Resolve ``auto`` to ``slurm`` or ``local``, saying which and why; check an explicit ``slurm``."""
    if backend not in ("auto", "local", "slurm"):
        raise JobError(f"backend: unknown backend {backend!r}. Fix: use 'auto', 'local' or 'slurm'.")
    if backend == "local":
        return "local"
    ok, why = slurm_available()
    if backend == "slurm" and not ok:
        raise JobError(f"backend='slurm' was asked for but Slurm is not usable: {why}. Fix: run on a cluster "
                       "login node, start the emulated cluster (make slurm-up), or use backend='local'.")
    chosen = "slurm" if ok else "local"
    if verbose and backend == "auto":
        print(f"backend: {chosen} ({why})")
    return chosen


def _run(command: list[str], what: str, env: dict | None = None) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JobError(f"{what} could not run: {exc}") from None
    if result.returncode != 0:
        raise JobError(f"{what} refused the request (exit {result.returncode}): "
                       f"{(result.stderr or result.stdout).strip()}")
    return result.stdout


def _job_env(spec: JobSpec) -> dict:
    env = {"TUTORIAL_RUN_DIR": str(spec.run_dir), "TUTORIAL_STOP_FILE": str(spec.run_dir / "STOP"),
           "TUTORIAL_PYTHON": spec.python, "TUTORIAL_WORKDIR": str(REPO_ROOT),
           "GPUS_PER_NODE": str(spec.gpus_per_node), "PYTHONPATH": str(REPO_ROOT),
           "TUTORIAL_MODULE": spec.module,
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1" if spec.config.device == "cpu" else "4")}
    if spec.max_restarts > 0:
        # torchrun shares its rendezvous store with the ranks; after a restart the new ranks read the dead
        # ranks' addresses from it and fail to connect (pytorch/pytorch#135712). A fresh store per round fixes it.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _submit_local(spec: JobSpec, after: Job | None) -> str:
    if spec.nodes == 1:
        commands = [torchrun_command(spec)]
    else:  # emulate several nodes on this machine: one torchrun agent per node, c10d rendezvous
        endpoint = f"127.0.0.1:{_free_port()}"
        commands = [["env", f"TUTORIAL_NODE_NAME=local-node{n + 1}"]
                    + torchrun_command(spec, node_rank_is_host=(n == 0), endpoint=endpoint)
                    for n in range(spec.nodes)]
    record = {"backend": "local", "name": spec.config.name, "spec": spec.to_dict(), "commands": commands,
              "workdir": str(REPO_ROOT), "time": spec.time, "env": _job_env(spec),
              "after": str(after.run_dir) if after else None, "submitted": time.time()}
    (spec.run_dir / STATE_FILE).unlink(missing_ok=True)
    write_job_file(spec.run_dir, {**record, "id": "local-pending"})
    supervisor = subprocess.Popen([sys.executable, "-m", "tutorial_lib.jobs.supervisor", str(spec.run_dir)],
                                  cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=open(spec.run_dir / "supervisor.log", "ab"), start_new_session=True)
    job_id = f"local-{supervisor.pid}"
    write_job_file(spec.run_dir, {**record, "id": job_id, "supervisor_pid": supervisor.pid})
    return job_id


def _local_status(run_dir: Path) -> dict:
    state = read_state(run_dir)
    supervisor = read_job_file(run_dir).get("supervisor_pid")
    if state is None:
        if supervisor and not pid_alive(int(supervisor)):
            return {"state": "FAILED", "exit_code": None, "reason": "the local supervisor died before starting"}
        return {"state": "PENDING", "exit_code": None}
    if state["state"] not in FINAL_STATES and supervisor and not pid_alive(int(supervisor)):
        return {"state": "FAILED", "exit_code": None, "reason": "the local supervisor was killed"}
    return {"state": state["state"], "exit_code": state.get("exit_code")}


def _local_cancel(run_dir: Path) -> None:
    supervisor = read_job_file(run_dir).get("supervisor_pid")
    if supervisor and pid_alive(int(supervisor)):
        os.kill(int(supervisor), signal.SIGTERM)
        return
    for pid in (read_state(run_dir) or {}).get("pids", []):  # supervisor gone: end its agents directly
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def sbatch_command(spec: JobSpec, after: Job | None = None) -> list[str]:
    """The sbatch command line (argv list) that submits ``spec`` with cluster_scripts/train.sbatch."""
    command = ["sbatch", "--parsable", f"--job-name={spec.config.name}", f"--nodes={spec.nodes}",
               "--ntasks-per-node=1", f"--time={spec.time}", f"--chdir={REPO_ROOT}",
               f"--output={spec.run_dir}/slurm-%j.out", "--export=ALL"]
    if spec.partition:
        command.append(f"--partition={spec.partition}")
    if spec.account:
        command.append(f"--account={spec.account}")
    if spec.config.device == "cuda" or spec.config.profile in ("gpu", "hal"):
        command.append(f"--gpus-per-node={spec.gpus_per_node}")
    if after is not None and after.backend == "slurm":
        command.append(f"--dependency=afterany:{after.id}")
    return command + spec.sbatch_options + [str(SBATCH_SCRIPT)] + spec.program_args()


def _submit_slurm(spec: JobSpec, after: Job | None) -> str:
    command = sbatch_command(spec, after)
    output = _run(command, "sbatch", env={**os.environ, **_job_env(spec)})
    job_id = output.strip().split(";")[0]
    if not job_id.isdigit():
        raise JobError(f"sbatch answered {output.strip()!r}, not a job id")
    write_job_file(spec.run_dir, {"backend": "slurm", "id": job_id, "name": spec.config.name,
                                  "spec": spec.to_dict(), "command": command, "submitted": time.time()})
    return job_id


def _slurm_fields(text: str) -> dict:
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def _slurm_status(job_id: str, run_dir: Path) -> dict:
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
        if shown.returncode == 0 and "JobState=" in shown.stdout:
            fields = _slurm_fields(shown.stdout)
            raw = fields["JobState"]
            exit_code = int(fields.get("ExitCode", "0:0").split(":")[0])
            return {"state": _SLURM_STATE_MAP.get(raw, raw if raw in STATES else "FAILED"),
                    "exit_code": exit_code if raw in FINAL_STATES else None, "slurm_state": raw,
                    "nodes": fields.get("NodeList")}
        acct = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State,ExitCode", "-j", job_id],
                              capture_output=True, text=True, timeout=30)
        if acct.returncode == 0 and acct.stdout.strip():
            raw, code = acct.stdout.strip().splitlines()[0].split("|")
            raw = raw.split()[0]
            return {"state": _SLURM_STATE_MAP.get(raw, raw if raw in STATES else "FAILED"),
                    "exit_code": int(code.split(":")[0]), "slurm_state": raw}
    except (OSError, subprocess.TimeoutExpired):
        pass
    # Slurm has forgotten the job (past MinJobAge, no accounting): judge by the run directory
    finished = (run_dir / "DONE").exists()
    return {"state": "COMPLETED" if finished else "FAILED", "exit_code": 0 if finished else None,
            "reason": "Slurm no longer knows this job; state taken from the run directory"}


# ------------------------------------------------------------------ submit
def submit(config: TrainConfig, nodes: int = 1, gpus_per_node: int = 1, backend: str = "auto",
           time: str | int = "00:30:00", partition: str | None = None, account: str | None = None,
           sbatch_options=(), max_restarts: int = 0, after: Job | None = None, check_data: bool = True,
           fresh: bool = False, verbose: bool = True, module: str = "tutorial_lib.train",
           module_args: list[str] | None = None) -> Job:
    """Validate and submit one training job; return its Job handle.

    ``gpus_per_node`` ranks run on each of ``nodes`` nodes (CPU processes when the config's device
    is the CPU). ``backend``: ``auto`` (Slurm if it answers, else this machine), ``local`` or
    ``slurm``. ``after``: start only once that job has ended (sweeps measure one job at a time).
    ``max_restarts``: torchrun restarts all ranks this many times if one dies.
    ``fresh``: delete an earlier run of the same name first (otherwise the job resumes from it).
    ``module``/``module_args``: run another program on every rank instead of the trainer (e.g.
    ``"tutorial_lib.bench", ["allreduce", "--out", ...]``); the config then only names the run directory.
    Everything is checked before anything is submitted; errors name the field and the fix.
    """
    chosen = choose_backend(backend, verbose)
    config = absolute_config(config)
    spec = make_spec(config, nodes, gpus_per_node, time, partition, account, sbatch_options, max_restarts,
                     check_data and module == "tutorial_lib.train", on_cluster=chosen == "slurm",
                     module=module, module_args=module_args)
    _prepare_run_dir(spec.run_dir, create=False)
    RunLock(spec.run_dir).check()
    if (spec.run_dir / "job.json").exists():
        try:
            previous = Job(spec.run_dir)
        except (JobError, ValueError):
            previous = None
        if previous is not None and not previous.done():
            raise JobError(f"run directory {spec.run_dir} already has a live job {previous.id} "
                           f"({previous.state}). Fix: wait for it or cancel it, or choose another name.")
    if fresh and spec.run_dir.exists():  # a run directory of ours (checked above), never another folder
        shutil.rmtree(spec.run_dir)
    _prepare_run_dir(spec.run_dir)
    job_id = _submit_slurm(spec, after) if chosen == "slurm" else _submit_local(spec, after)
    job = Job(spec.run_dir)
    if verbose:
        print(f"submitted {job.name}: job {job_id} on {chosen}, {nodes} node(s) x {gpus_per_node} rank(s), "
              f"run directory {spec.run_dir}")
    return job


def _prepare_run_dir(run_dir: Path, create: bool = True) -> None:
    try:
        prepare_run_dir(run_dir, create)
    except RunDirError as exc:
        raise ConfigError(str(exc)) from None


def sweep(config: TrainConfig, over: str, values, sequential: bool = True, **submit_args) -> list[Job]:
    """Submit one job per value of ``over`` (``nodes``, ``gpus_per_node`` or a config field).

    Run names get a suffix such as ``-nodes2`` or ``-batch_size256``. With ``sequential`` each job
    starts when the previous one has ended, so throughput measurements do not share the machine.
    """
    jobs: list[Job] = []
    for value in values:
        name = f"{config.name}-{over}{value}"
        job_args = dict(submit_args)
        if over in ("nodes", "gpus_per_node"):
            job_config = dataclasses.replace(config, name=name)
            job_args[over] = value
        elif over in {f.name for f in dataclasses.fields(TrainConfig)}:
            job_config = dataclasses.replace(config, name=name, **{over: value})
        else:
            raise JobError(f"over: cannot sweep {over!r}. Fix: use 'nodes', 'gpus_per_node' or a TrainConfig field.")
        if sequential and jobs:
            job_args["after"] = jobs[-1]
        jobs.append(submit(job_config, **job_args))
    return jobs
