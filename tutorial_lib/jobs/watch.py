"""One watcher per process: every job's state from one batched, cached, rate-limited query.

``Job.state``, ``Job.wait``, the live monitor and the notebooks' queue reports all ask :func:`watcher`, never
Slurm. For Slurm jobs it runs ONE ``squeue`` for every job it follows that has not ended (per cluster, i.e. per
``SLURM_CONF``), at most once per interval however many callers ask: the interval is 2 s after a change and
doubles up to 10 s while nothing changes; finished jobs are never asked about again. A job the controller has
forgotten is looked up with one ``sacct`` where accounting works, else in its run directory.

Nothing but Slurm's own answer or the run directory's records ends a job: a controller error or timeout makes the
job ``unknown`` (public ``UNKNOWN``) and the next query waits twice as long (2, 4, 8... up to 30 s), never a final
state. The run directory is read first on every call, as it costs no controller call: a Slurm job's batch script
appends an exit line as its last act (:mod:`tutorial_lib.rundir.job_exits`), and a local job's supervisor writes
its state file (:func:`tutorial_lib.jobs.local.local_seen`, through this same watcher).

Learned from submitit's ``InfoWatcher`` (one shared query for all registered jobs, errors bypassed instead of
raised, finished jobs left out of the query); written here because the states, the run-directory records and the
local backend are this project's own.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tutorial_lib.engine.errors import shorten
from tutorial_lib.jobs.local import local_seen
from tutorial_lib.jobs.slurm_values import is_job_id
from tutorial_lib.jobs.states import Seen, from_slurm
from tutorial_lib.numbers import whole_number
from tutorial_lib.rundir.job_exits import last_exit
from tutorial_lib.rundir.layout import DONE_FILE, slurm_log

MIN_INTERVAL_S = 2.0  # the shortest time between two queries of one cluster
MAX_INTERVAL_S = 10.0  # ...and the longest while every watched job stays as it was
MAX_BACKOFF_S = 30.0  # the longest wait before asking a controller that did not answer again
COMMAND_TIMEOUT_S = 20.0
# squeue's fields (-O), and the names the queue report shows them by (scontrol's words)
SQUEUE_FIELDS = {"JobID": "JobId", "Name": "JobName", "State": "JobState", "Reason": "Reason", "NumNodes": "NumNodes",
                 "NodeList": "NodeList", "BatchHost": "BatchHost", "TimeUsed": "RunTime", "TimeLimit": "TimeLimit",
                 "RestartCnt": "Restarts", "exit_code": "ExitCode", "STDOUT": "StdOut", "Command": "Command"}
_SEP = "\x1f"  # between squeue's fields: no path, name or reason holds it
NOT_KNOWN = "Invalid job id specified"  # Slurm's answer about a job it does not (or no longer) know
NO_ACCOUNTING = ("accounting storage is disabled", "Accounting storage type is not")


@dataclass(frozen=True)
class Watched:
    """What the watcher needs of a job: its backend, id, run directory and record (a Job has all four)."""

    backend: str
    id: str
    run_dir: Path
    record: dict = field(default_factory=dict)


@dataclass
class _Entry:
    watched: object
    seen: Seen | None = None
    history: list = field(default_factory=list)  # (time, state, source) at each change


@dataclass
class _Cluster:
    due: float = 0.0  # monotonic time of the next query
    last: float = float("-inf")
    delay: float = MIN_INTERVAL_S
    failures: int = 0
    in_flight: bool = False
    sacct: bool = True  # False once sacct said accounting is off here


def slurm_env(conf: str | None) -> dict:
    """The environment of a Slurm command for the cluster of ``conf`` (a job's recorded ``SLURM_CONF``)."""
    env = {key: value for key, value in os.environ.items() if key != "SLURM_CONF"}
    return {**env, "SLURM_CONF": conf} if conf else env


def cluster_of(job) -> str | None:
    """The ``SLURM_CONF`` a Slurm job was submitted with (a record from before it was kept: this process's)."""
    record = job.record or {}
    return record["slurm_conf"] if "slurm_conf" in record else os.environ.get("SLURM_CONF")


def squeue_command(ids: list[str]) -> list[str]:
    """One squeue for every job in ``ids`` (finished ones too, while the controller keeps them)."""
    return ["squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}",
            "--Format=" + ",".join(f"{name}:{_SEP}" for name in SQUEUE_FIELDS)]


def parse_squeue(text: str) -> dict[str, dict]:
    """squeue's lines (:func:`squeue_command`) as ``{job id: {report name: value}}``; the exit status as
    scontrol writes it (``code:signal``)."""
    jobs = {}
    for line in text.splitlines():
        values = line.split(_SEP)
        if len(values) < len(SQUEUE_FIELDS):
            continue
        fields = dict(zip(SQUEUE_FIELDS.values(), (v.strip() for v in values), strict=False))
        status = whole_number(fields["ExitCode"])
        if status is not None:  # a wait status: code in the high byte, the signal in the low bits
            fields["ExitCode"] = f"{status >> 8}:{status & 0x7F}"
        fields["StdOut"] = fields["StdOut"].replace("%j", fields["JobId"])
        jobs[fields["JobId"]] = fields
    return jobs


def seen_from_squeue(fields: dict) -> Seen:
    """A job's state from its squeue fields: Slurm's own answer."""
    raw = fields["JobState"]
    state = from_slurm(raw)
    code = whole_number(fields["ExitCode"].split(":")[0])
    reason = "" if fields.get("Reason") in ("None", "", None) else f"Slurm's reason: {fields['Reason']}"
    if state == "unknown":
        reason = f"Slurm state {raw} is not one this watcher knows"
    return Seen(state, "slurm", exit_code=code if state in ("completed", "failed", "cancelled", "timeout") else None,
                reason=reason, slurm_state=raw, fields=fields)


def run_dir_seen(watched) -> Seen | None:
    """A final state from the run directory's own records: the batch script's exit line for this job."""
    line = last_exit(watched.run_dir, watched.id)
    if line is None or line.get("requeued"):
        return None
    if line.get("source") == "slurm":  # what Slurm answered a later job's launcher
        return Seen(from_slurm(str(line.get("state") or "FAILED")), "exit record", slurm_state=line.get("state"))
    status = line.get("status")
    return Seen("completed" if status == 0 else "failed", "exit record",
                exit_code=status if isinstance(status, int) else None,
                reason="" if status == 0 else f"its batch script exited with status {status}")


def forgotten_seen(watched) -> Seen:
    """A job that Slurm no longer knows (nor its accounting): ended, and DONE says whether training finished."""
    if (Path(watched.run_dir) / DONE_FILE).exists():
        return Seen("completed", "DONE", exit_code=0, reason="Slurm no longer knows this job; its run directory "
                                                             "holds DONE")
    return Seen("failed", "run directory", reason="Slurm no longer knows this job and its run directory records no "
                f"end of it (no DONE, no exit line); see {slurm_log(watched.run_dir, watched.id)}")


class Watcher:
    """Every job this process follows, and what was last seen of each (see the module's docstring)."""

    def __init__(self, min_interval: float = MIN_INTERVAL_S, max_interval: float = MAX_INTERVAL_S,
                 max_backoff: float = MAX_BACKOFF_S):
        self.min_interval, self.max_interval, self.max_backoff = min_interval, max_interval, max_backoff
        self.calls: Counter = Counter()  # controller commands run, by name
        self._lock = threading.Lock()
        self._entries: dict[tuple, _Entry] = {}
        self._clusters: dict[str | None, _Cluster] = {}

    # ------------------------------------------------------------------ asking
    def status(self, job, answered: bool = False) -> Seen:
        """What is known of ``job`` now (a Job, or a :class:`Watched`): from the run directory, else from the
        last query of its cluster, which runs here when it is due. ``answered``: where the controller has not
        answered about this job yet, wait for its next allowed query (at most the shortest interval)."""
        entry = self._entry(job)
        if job.backend == "local":  # files only: read afresh at every call
            return self._set(entry, local_seen(Path(job.run_dir), job.record))
        if entry.seen is not None and entry.seen.final:
            return entry.seen
        if not is_job_id(job.id):  # r43n: an id of 5,000 digits reached int() below
            return self._set(entry, Seen("failed", "run directory", reason=f"its record has no Slurm job id "
                                         f"({shorten(job.id)}): sbatch never answered"))
        ended = run_dir_seen(job)
        if ended is not None:
            return self._set(entry, ended)
        self._query_if_due(self._conf(job), first=entry.seen is None or (answered and not entry.seen.fields))
        return entry.seen or Seen("unknown", "no answer yet", reason="the Slurm controller has not answered yet")

    def register(self, job) -> None:
        """Follow ``job`` from now on (a Job does so when it is made): its cluster's next query includes it."""
        self._entry(job)

    def submitted(self, job) -> None:
        """A job sbatch just accepted: pending until the controller says more (no query needed to know that)."""
        self._set(self._entry(job), Seen("pending", "submitted"))

    def refresh(self, job) -> None:
        """Ask ``job``'s cluster again as soon as the rate limit allows (after a cancel: its state will change)."""
        with self._lock:
            cluster = self._clusters.setdefault(self._conf(job), _Cluster())
            cluster.delay = self.min_interval
            cluster.due = min(cluster.due, cluster.last + self.min_interval)

    def history(self, job) -> list[tuple[float, str, str]]:
        """``(time, state, source)`` each time ``job``'s state changed, as this watcher saw it."""
        with self._lock:
            return list(self._entry_locked(job).history)

    # ------------------------------------------------------------ bookkeeping
    @staticmethod
    def _conf(job) -> str | None:
        return cluster_of(job)

    def _key(self, job) -> tuple:
        if job.backend == "local":
            return ("local", str(Path(job.run_dir).resolve()))
        return ("slurm", self._conf(job), str(job.id))

    def _entry_locked(self, job) -> _Entry:
        key = self._key(job)
        if key not in self._entries:
            self._entries[key] = _Entry(job)
        return self._entries[key]

    def _entry(self, job) -> _Entry:
        with self._lock:
            return self._entry_locked(job)

    def _set(self, entry: _Entry, seen: Seen) -> Seen:
        with self._lock:
            return self._set_locked(entry, seen)

    @staticmethod
    def _set_locked(entry: _Entry, seen: Seen) -> Seen:
        if entry.seen is None or (entry.seen.state, entry.seen.source) != (seen.state, seen.source):
            entry.history.append((seen.time, seen.state, seen.source))
        entry.seen = seen
        return seen

    # ---------------------------------------------------------------- querying
    def _query_if_due(self, conf: str | None, first: bool) -> None:
        with self._lock:
            cluster = self._clusters.setdefault(conf, _Cluster())
            if first and not cluster.failures:  # asked at the next allowed time, not after a long quiet interval
                cluster.due = min(cluster.due, cluster.last + self.min_interval)
            wait = cluster.due - time.monotonic()
            if cluster.in_flight or (wait > 0 and not first):
                return
        if wait > 0:  # a job never seen: its first answer is worth a short wait (at most min_interval)
            time.sleep(min(wait, self.min_interval))
        with self._lock:
            if cluster.in_flight or time.monotonic() < cluster.due:
                return
            cluster.in_flight = True
            watched = {key[2]: entry for key, entry in self._entries.items()
                       if key[0] == "slurm" and key[1] == conf and not (entry.seen and entry.seen.final)}
        try:
            answers, error = self._ask(conf, sorted(watched, key=int), cluster)
        finally:
            with self._lock:
                cluster.in_flight = False
        with self._lock:
            self._apply(cluster, watched, answers, error)

    def _run(self, command: list[str], conf: str | None) -> subprocess.CompletedProcess | str:
        """A Slurm command's result, or what went wrong running it (a string)."""
        self.calls[command[0]] += 1
        try:
            return subprocess.run(command, capture_output=True, text=True, errors="replace",  # r43s: Latin-1 names
                                  env=slurm_env(conf), timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{command[0]} did not answer within {COMMAND_TIMEOUT_S:g} s"
        except OSError as exc:
            return f"{command[0]} could not run ({exc})"

    def _ask(self, conf, ids: list[str], cluster: _Cluster) -> tuple[dict[str, Seen], str | None]:
        """Slurm's answers for ``ids``: squeue for all of them, sacct for those it has forgotten."""
        if not ids:
            return {}, None
        shown = self._run(squeue_command(ids), conf)
        if isinstance(shown, str):
            return {}, shown
        words = " ".join((shown.stderr or shown.stdout).split())
        if shown.returncode != 0 and NOT_KNOWN not in words:
            return {}, words or f"squeue exited with status {shown.returncode}"
        answers = {job_id: seen_from_squeue(fields) for job_id, fields in parse_squeue(shown.stdout).items()
                   if job_id in ids}
        forgotten = [job_id for job_id in ids if job_id not in answers]
        if forgotten and cluster.sacct:
            answered = self._sacct(conf, forgotten, cluster)
            if isinstance(answered, str):
                return answers, answered
            answers.update(answered)
        return answers, None

    def _sacct(self, conf, ids: list[str], cluster: _Cluster) -> dict[str, Seen] | str:
        acct = self._run(["sacct", "--noheader", "--allocations", "--parsable2", "--format=JobIDRaw,State,ExitCode",
                          f"--jobs={','.join(ids)}"], conf)
        if isinstance(acct, str):
            return acct
        if acct.returncode != 0:
            words = " ".join((acct.stderr or acct.stdout).split())
            if any(text in words for text in NO_ACCOUNTING):
                cluster.sacct = False  # this cluster keeps no accounting: never ask again
                return {}
            return words or f"sacct exited with status {acct.returncode}"
        answers = {}
        for line in acct.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[0] in ids:
                raw = parts[1].split()[0] if parts[1].strip() else "UNKNOWN"
                answers[parts[0]] = Seen(from_slurm(raw), "sacct", exit_code=whole_number(parts[2].split(":")[0]),
                                         slurm_state=raw)
        return answers

    def _apply(self, cluster: _Cluster, watched: dict[str, _Entry], answers: dict[str, Seen],
               error: str | None) -> None:
        now = time.monotonic()
        cluster.last = now
        if error is not None:
            cluster.failures += 1
            cluster.delay = min(self.min_interval * 2 ** cluster.failures, self.max_backoff)
            for entry in watched.values():
                if entry.seen is None or not entry.seen.final:
                    last = entry.seen.fields if entry.seen else {}
                    self._set_locked(entry, Seen("unknown", "no answer", fields=last, reason=(
                        f"the Slurm controller did not answer ({error}); asking again in {cluster.delay:.0f} s")))
        else:
            cluster.failures = 0
            before = {job_id: entry.seen and entry.seen.state for job_id, entry in watched.items()}
            for job_id, entry in watched.items():
                self._set_locked(entry, answers.get(job_id) or forgotten_seen(entry.watched))
            changed = any(entry.seen.state != before[job_id] for job_id, entry in watched.items())
            cluster.delay = self.min_interval if changed else min(cluster.delay * 2, self.max_interval)
        cluster.due = now + cluster.delay


_WATCHER: Watcher | None = None
_CREATE = threading.Lock()


def watcher() -> Watcher:
    """This process's one watcher."""
    global _WATCHER
    with _CREATE:
        if _WATCHER is None:
            _WATCHER = Watcher()
        return _WATCHER


def replace_watcher(new: Watcher | None = None) -> Watcher:
    """Start this process's watcher afresh (``new``, or one with the default intervals); returns it."""
    global _WATCHER
    with _CREATE:
        _WATCHER = new or Watcher()
        return _WATCHER
