"""What a Slurm daemon's fault does to a running job: the controller restarted, a node lost.

These tests stop and start Slurm's own daemons, so they never touch the cluster the other tests share: a module
fixture starts a second, strict emulated cluster beside it (``TUTORIAL_SLURM_INSTANCE=fault``: its own
/etc/slurm-fault, state, logs and ports, ``SlurmdTimeout`` 10 s so a lost node is noticed in seconds), points this
module's Slurm commands at it (``SLURM_CONF``), and removes it again whatever happened. Its strict nodes see this
checkout's virtualenv at /opt/tutorial-site/venv, so its jobs get the site block of notebooks/params/ci-site.yaml.

Every wait is for an event (a metrics event, a state, a daemon gone or answering) under a generous ceiling.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tutorial_lib import REPO_ROOT, jobs
from tutorial_lib.engine.config import make_config
from tutorial_lib.jobs import watch
from tutorial_lib.jobs.site import load_site
from tutorial_lib.rundir.metrics import read_metrics

INSTANCE = "fault"
CONF_DIR = Path(f"/etc/slurm-{INSTANCE}")
RUN = Path(f"/run/slurm-{INSTANCE}")
LEFT_BY_THE_INSTANCE = (CONF_DIR, RUN, Path(f"/run/tutorial-local-slurm-{INSTANCE}.lock"))  # --purge takes the rest
SCRIPTS = REPO_ROOT / "cluster_scripts"
START, STOP = SCRIPTS / "start_local_slurm.sh", SCRIPTS / "stop_local_slurm.sh"
SITE = REPO_ROOT / "notebooks" / "params" / "ci-site.yaml"
SMALL = dict(dataset="digits", image_size=16, arch="resnet18", batch_size=16, progress=False, workers=0, device="cpu",
             log_every=1)
CEILING_S = 600


class FaultCluster:
    """The second cluster: its daemons, and what its jobs need."""

    def __init__(self, env: dict):
        self.env = env  # the start/stop scripts' environment
        self.conf = str(CONF_DIR / "slurm.conf")
        self.site = load_site(SITE)

    def pid(self, daemon: str) -> int | None:
        """The pid of ``slurmctld`` or ``slurmd-node1``... while it runs."""
        try:
            pid = int((RUN / f"{daemon}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if psutil.pid_exists(pid) else None

    def start(self) -> None:
        """Start whatever daemon of the instance is not running, and wait until its nodes are usable."""
        started = subprocess.run(["bash", str(START)], env=self.env, capture_output=True, text=True, timeout=300)
        assert started.returncode == 0, f"the fault instance did not start:\n{started.stdout}\n{started.stderr}"

    def squeue(self, job_id: str) -> str:
        """Slurm's own word on a job (JobState), asked directly."""
        shown = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True,
                               text=True, timeout=60, env={**os.environ, "SLURM_CONF": self.conf})
        return shown.stdout.strip()


def _refusal() -> str | None:
    if os.geteuid() != 0:
        return "these tests start a second Slurm instance, which needs root"
    missing = [tool for tool in ("slurmctld", "slurmd", "munged", "unshare") if not _which(tool)]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install slurm-wlm munge"
    if not (REPO_ROOT / ".venv").is_dir():
        return "no .venv in this checkout for the strict instance's nodes (make setup)"
    if (RUN / "slurmctld.pid").exists():
        return f"a '{INSTANCE}' Slurm instance already runs ({RUN}): another test run's; not touched"
    return None


def _which(tool: str) -> bool:
    return any(Path(folder, tool).is_file() for folder in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin"])


@pytest.fixture(scope="module")
def fault_cluster(slurm):
    refused = _refusal()
    if refused:
        if os.environ.get("TUTORIAL_REQUIRE_SLURM"):
            pytest.fail(f"TUTORIAL_REQUIRE_SLURM is set but {refused}")
        pytest.skip(refused)
    existed = {path: path.exists() for path in LEFT_BY_THE_INSTANCE}
    env = {**os.environ, "TUTORIAL_SLURM_INSTANCE": INSTANCE, "TUTORIAL_SLURM_STRICT": "1",
           "TUTORIAL_SLURMD_TIMEOUT": "10", "TUTORIAL_SLURM_TIMEOUT": "180"}
    env.pop("SLURM_CONF", None)
    cluster = FaultCluster(env)
    try:
        cluster.start()
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", cluster.conf)
            yield cluster
    finally:
        subprocess.run(["bash", str(STOP), "--cancel-jobs", "--purge"], env=env, capture_output=True, timeout=300)
        for path, was_there in existed.items():
            if not was_there and path.exists():
                subprocess.run(["rm", "-rf", "--", str(path)], check=False)


def _submit(runs, cluster: FaultCluster, name: str, **settings) -> jobs.Job:
    cfg = make_config("smoke", name=name, output_root=str(runs.output_root), data_dir=str(runs.data_dir),
                      **{**SMALL, **settings})
    return jobs.submit(cfg, backend="slurm", site=cluster.site, verbose=False)


def _wait_for(predicate, what: str, job: jobs.Job | None = None, ceiling: float = CEILING_S, poll: float = 0.3):
    deadline = time.monotonic() + ceiling
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} within {ceiling} s" + (f":\n{job.logs(tail=30)}" if job else "")
        time.sleep(poll)


def _events(job: jobs.Job, kind: str) -> list[dict]:
    return [event for event in read_metrics(job.run_dir) if event["event"] == kind]


def _ranks(job: jobs.Job) -> list[psutil.Process]:
    """The job's training processes (their environment names its run directory; torchrun gives each a rank)."""
    found = []
    for process in psutil.process_iter():
        try:
            environ = process.environ()
        except psutil.Error:
            continue
        if environ.get("TUTORIAL_RUN_DIR") == str(job.run_dir) and "LOCAL_RANK" in environ:
            found.append(process)
    return found


def _signal(processes: list[psutil.Process], sig: int) -> None:
    for process in processes:
        try:
            process.send_signal(sig)  # psutil checks that the pid is still that very process
        except psutil.Error:
            pass


def test_controller_restart_mid_job_is_followed_to_the_end(fault_cluster, make_runs):
    """slurmctld stopped while the job runs (its ranks paused, so it cannot end meanwhile): the watcher says
    unknown, never a final state, and follows the job, once the controller is back, to Slurm's own end.
    Before: the first unanswered call made the job FAILED ('Slurm no longer knows this job')."""
    watch.replace_watcher()
    job = _submit(make_runs(), fault_cluster, "ctld-restart", epochs=1, max_steps_per_epoch=20)
    paused = []
    try:
        _wait_for(lambda: _events(job, "step"), "first step", job)
        paused = _wait_for(lambda: _ranks(job), "rank process", job, ceiling=60)
        _signal(paused, signal.SIGSTOP)
        controller = fault_cluster.pid("slurmctld")
        os.kill(controller, signal.SIGTERM)
        _wait_for(lambda: not psutil.pid_exists(controller), "slurmctld gone", ceiling=120)
        status = _wait_for(lambda: (lambda s: s if s["watch"] == "unknown" else None)(job.status()),
                           "unknown while the controller is down", ceiling=120)
        assert status["state"] == "UNKNOWN" and status["source"] == "no answer" and not job.done(), status
        fault_cluster.start()  # the controller again, with the state it saved
        _signal(paused, signal.SIGCONT)
        assert job.wait(timeout=CEILING_S) == "COMPLETED", job.explain()
        assert _wait_for(lambda: fault_cluster.squeue(job.id) in ("COMPLETED", "FAILED", "CANCELLED"),
                         "Slurm's final state", ceiling=120) and fault_cluster.squeue(job.id) == "COMPLETED"
        seen = [state for _, state, _ in watch.watcher().history(job)]
        assert "unknown" in seen and seen[-1] == "completed" and "failed" not in seen, seen
        assert len(_events(job, "end")) == 1
    finally:
        _signal(paused, signal.SIGCONT)
        if fault_cluster.pid("slurmctld") is None:
            fault_cluster.start()
        if not job.done():
            job.cancel()


def _node_of(job: jobs.Job) -> str:
    fields = _wait_for(lambda: job.queue_fields().get("NodeList") and job.queue_fields(), "the job's node", job)
    return fields["NodeList"]


def _namespace_of(cluster: FaultCluster, node: str) -> str:
    """The mount namespace of the node's slurmd: the strict instance starts each node daemon in one of its own,
    which its job steps and their processes share."""
    namespace = os.readlink(f"/proc/{cluster.pid(f'slurmd-{node}')}/ns/mnt")
    assert namespace != os.readlink("/proc/self/ns/mnt"), "the node daemon shares our mount namespace: not strict"
    return namespace


def _lose_node(namespace: str) -> int:
    """The node is gone: its slurmd and every process in its namespace are SIGKILLed. Returns how many."""
    doomed = []
    for process in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{process.pid}/ns/mnt") == namespace:
                doomed.append(process)
        except OSError:
            continue
    _signal(doomed, signal.SIGKILL)
    return len(doomed)


def test_lost_node_ends_in_one_line_and_resubmission_resumes(fault_cluster, make_runs):
    """The node running the job is lost just after an epoch's checkpoint (its slurmd and processes killed): Slurm
    notices (SlurmdTimeout) and requeues the job (--requeue), which resumes from that checkpoint on the other node;
    or it ends the job with one line, and submitting it again resumes."""
    watch.replace_watcher()
    runs = make_runs()
    job = _submit(runs, fault_cluster, "lost-node", epochs=2, max_steps_per_epoch=4)
    lost = None
    try:
        _wait_for(lambda: _events(job, "step"), "first step", job)
        lost = _node_of(job)
        namespace = _namespace_of(fault_cluster, lost)
        _wait_for(lambda: _events(job, "epoch"), "the first epoch's checkpoint", job, poll=0.05)
        assert _lose_node(namespace) >= 2  # the daemon and at least the job's own processes
        checkpointed = _events(job, "epoch")[-1]["epoch"]  # the last epoch saved before the node went
        state = job.wait(timeout=CEILING_S, check=False)
        resumed = job
        if state != "COMPLETED":  # ended: one line, then the next submission resumes
            message = job.explain()
            assert "\n" not in message and "NODE_FAIL" in message and "resumes" in message, message
            resumed = _submit(runs, fault_cluster, "lost-node", epochs=2, max_steps_per_epoch=4)
            assert resumed.wait(timeout=CEILING_S) == "COMPLETED", resumed.explain()
        seen = [state for _, state, _ in watch.watcher().history(job)]
        resume = _events(resumed, "resume")[-1]
        assert (resume["epoch"], resume["step_in_epoch"], resume["global_step"]) == (
            checkpointed, 0, 4 * checkpointed), resume  # from the last checkpoint the lost node wrote
        assert [e["epoch"] for e in _events(resumed, "epoch")] == [1, 2]
        print(f"\nnode {lost} lost after epoch {checkpointed}: the job went {' -> '.join(seen)}; resumed at global "
              f"step {resume['global_step']} and completed")
    finally:
        if not job.done():
            job.cancel()
        if lost is not None:
            fault_cluster.start()  # the node's daemon again (the instance is removed at the module's end)
