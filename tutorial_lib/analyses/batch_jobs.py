"""A batch job seen from outside, for notebook 05: its script, its command, the scheduler's view, its log.

    from tutorial_lib.analyses import batch_jobs
    batch_jobs.show_sbatch("2")                          # a section of cluster_scripts/train.sbatch, as code
    print(batch_jobs.command_text(argv))                 # an argv as a copy-pasteable shell command
    batch_jobs.queue_report(job)                         # what the scheduler said about the job (the watcher's)
    print(batch_jobs.readable_log(job.logs(), tail=40))  # the log without progress-bar redraws
    batch_jobs.wait_for_event(job, "step")               # block until the job has logged its first step

What the run directory says about a job (hosts, throughput, accuracy) is in :mod:`tutorial_lib.analyses.study`.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tutorial_lib import REPO_ROOT
from tutorial_lib.jobs.states import FINAL_STATES

SBATCH_SCRIPT = REPO_ROOT / "cluster_scripts" / "train.sbatch"
_SECTION_RULE = re.compile(r"^# -{10,}\s*$")
_SECTION_TITLE = re.compile(r"^#\s+(\d+)\.\s+(.*)$")


# ------------------------------------------------------------ the batch script
@dataclass(frozen=True)
class ScriptSection:
    """A piece of a shell script; shows as a bash code block in a notebook, as plain text elsewhere."""

    key: str
    title: str
    text: str

    def _repr_markdown_(self) -> str:
        return f"**{self.title}**\n\n```bash\n{self.text}\n```"

    def __repr__(self) -> str:
        return f"{self.title}\n{self.text}"

    def __str__(self) -> str:
        return self.text


def sbatch_sections(path: str | os.PathLike = SBATCH_SCRIPT) -> dict[str, ScriptSection]:
    """Split a batch script into its sections, in file order.

    Keys: ``header`` (the comment block at the top), ``directives`` (the ``#SBATCH`` lines and the
    comments between them), ``setup`` (what follows them, up to the first numbered section), then
    ``"1"``, ``"2"``... for every section that starts with a ``# ----`` rule followed by a
    ``# N. Title`` line (the section runs to the next rule).
    """
    lines = Path(path).read_text().splitlines()
    starts = [i for i in range(len(lines) - 1)
              if _SECTION_RULE.match(lines[i]) and _SECTION_TITLE.match(lines[i + 1])]
    first_numbered = starts[0] if starts else len(lines)
    prologue = lines[:first_numbered]
    directive_rows = [i for i, line in enumerate(prologue) if line.startswith("#SBATCH")]
    sections: dict[str, ScriptSection] = {}

    def add(key: str, title: str, chunk: list[str]) -> None:
        text = "\n".join(chunk).strip("\n")
        if text:
            sections[key] = ScriptSection(key, title, text)

    if directive_rows:
        first, last = directive_rows[0], directive_rows[-1]
        while first > 0 and prologue[first - 1].startswith("#") and not prologue[first - 1].startswith("# ="):
            first -= 1  # comments right above the first #SBATCH line belong to it
        add("header", "The header: usage, inputs, what the script does", prologue[:first])
        add("directives", "#SBATCH directives (defaults; sbatch command-line options override them)",
            prologue[first:last + 1])
        add("setup", "Strict mode, and a guard against running the script without sbatch", prologue[last + 1:])
    else:
        add("header", "The header", prologue)
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        number, title = _SECTION_TITLE.match(lines[start + 1]).groups()
        add(number, f"{number}. {title.strip()}", lines[start:end])
    return sections


def show_sbatch(*keys: str, path: str | os.PathLike = SBATCH_SCRIPT) -> ScriptSection:
    """The named section(s) of ``cluster_scripts/train.sbatch`` as one displayable code block.

    Example: ``batch_jobs.show_sbatch("2")`` (the rendezvous), ``batch_jobs.show_sbatch("directives")``.
    """
    sections = sbatch_sections(path)
    missing = [key for key in keys if key not in sections]
    if missing or not keys:
        raise KeyError(f"{Path(path).name} has no section {missing or '(none asked for)'}; "
                       f"it has: {', '.join(sections)}")
    chosen = [sections[key] for key in keys]
    return ScriptSection("+".join(keys), " / ".join(s.title for s in chosen),
                         "\n\n".join(s.text for s in chosen))


def command_text(argv: Sequence[str], width: int = 100, indent: str = "    ") -> str:
    """An argv list as one shell command a person can copy: quoted, wrapped with backslashes.

    A ``--flag value`` pair is never split across lines.
    """
    words = [shlex.quote(str(word)) for word in argv]
    units: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        takes_value = word.startswith("--") and "=" not in word and i + 1 < len(words)
        if takes_value and not words[i + 1].startswith("-"):
            units.append(f"{word} {words[i + 1]}")
            i += 2
        else:
            units.append(word)
            i += 1
    lines, current = [], ""
    for unit in units:
        if current and len(current) + 1 + len(unit) > width - 2:
            lines.append(current)
            current = indent + unit
        else:
            current = f"{current} {unit}" if current else unit
    lines.append(current)
    return " \\\n".join(lines)


# ---------------------------------------------------------------- live jobs
def wait_for_event(job, event: str = "step", timeout: float = 300, poll: float = 0.5) -> dict:
    """Block until ``job`` has logged its first ``event`` record; return that record.

    Raises RuntimeError (with the job's own explanation) if the job ends first, TimeoutError after
    ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        done = job.done()  # before reading the metrics: a job that logged and then ended counts
        for record in job.events():
            if record.get("event") == event:
                return record
        if done:
            raise RuntimeError(f"{job.name} ended before logging a {event!r} event.\n{job.explain()}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{job.name} logged no {event!r} event within {timeout:g} s (state {job.state}). "
                               "Fix: check job.logs(), or raise the timeout on a busy cluster.")
        time.sleep(poll)


_STACK_FRAME = re.compile(r"^frame #\d+: ")
_PROGRESS_BAR = re.compile(r"\d{1,3}%\|.*\|\s*\d+/\d+")  # a tqdm redraw: "epoch 1/2:  50%|#####  | 5/10 [..]"
# the two halves of a redraw cut apart by another write: "epoch 1/3:  25%|##5  " and "| 5/22 [00:01<00:04, 3.5it/s]"
_BAR_START = re.compile(r"(?:\S+ \d+/\d+:)?\s*\d{1,3}%\|[^|]*\|?\s*$")
_BAR_END = re.compile(r"^\s*\|?\s*\d+/\d+ \[[\d:?]+<[\d:?]*(,[^\]]*)?\]?\s*$")
_BAR_FIELD = re.compile(r"\s*([\d:?]+<[\d:?]*|[\d.?]+(it/s|s/it)|\w+=\S*)\s*")  # elapsed<left, rate, key=value


def _after_progress_bar(line: str) -> str:
    """Text printed into a tqdm redraw (stdout and stderr share one log file, so rank 0's own line can land
    inside a half-written bar): what follows the bar's closing ``]``, or, where the bar was cut off, what
    follows its last ``[elapsed<left, rate, key=value`` field. Empty for a plain redraw."""
    rest = line[_PROGRESS_BAR.search(line).end():].lstrip()
    if not rest.startswith("["):
        return rest.strip()
    rest = rest[1:]
    if "]" in rest:
        return rest.split("]", 1)[1].strip()
    fields = rest.split(",")
    while fields and _BAR_FIELD.fullmatch(fields[0]):
        fields.pop(0)
    return ",".join(fields).strip()


def readable_log(text: str, tail: int | None = None) -> str:
    """A job log made for reading: progress-bar redraws dropped, also the halves of one cut apart by another
    write (tqdm writes one per update; text
    read in Python's universal-newline mode turns each ``\\r`` into a line break) but a line printed into
    one kept, blank lines dropped,
    runs of C++ stack frames (``frame #3: ...``) folded into one line; the last ``tail`` lines if given.

    ``Job.logs()`` gives the raw text; this is for reading it in a notebook.
    """
    lines: list[str] = []
    frames = 0
    for raw in text.split("\n"):
        line = next((part for part in reversed(raw.split("\r")) if part.strip()), "").strip()
        if _STACK_FRAME.match(line) or line == "<omitting python frames>":
            frames += 1
            continue
        if frames:
            lines.append(f"    [... {frames} stack frame lines ...]")
            frames = 0
        if line and _PROGRESS_BAR.search(line):
            line = _after_progress_bar(line)
        elif line and _BAR_END.match(line):
            line = ""
        elif line and _BAR_START.search(line):
            line = line[:_BAR_START.search(line).start()].strip()
        if line:
            lines.append(line)
    if frames:
        lines.append(f"    [... {frames} stack frame lines ...]")
    return "\n".join(lines[-tail:] if tail else lines)


SCONTROL_FIELDS = ("JobId", "JobName", "JobState", "Reason", "NumNodes", "NodeList", "BatchHost", "RunTime",
                   "TimeLimit", "Restarts", "ExitCode", "StdOut")


def _without_fields(job_id, status: dict) -> dict:
    """A Slurm job's report where the watcher holds none of the scheduler's fields, saying why from its status:
    ended (its state from the run directory's records, and where the fields are now), or not answered yet (the
    issue-44 read: "the scheduler has not answered yet" printed for a job that had ended)."""
    report = {"JobId": job_id, "JobState": status["state"], "StateFrom": status.get("source", "")}
    if status["state"] in FINAL_STATES:
        report["note"] = (f"the job has ended; its state comes from the {status.get('source') or 'watcher'}, not "
                          f"from a scheduler query, so no scontrol fields are kept: `sacct -j {job_id} --format="
                          "JobID,State,NodeList,ExitCode` lists them on the cluster")
    elif status.get("reason"):
        report["note"] = status["reason"]
    else:
        report["note"] = ("submitted; the scheduler has not reported its fields yet" if status.get("source") ==
                          "submitted" else "the scheduler has not answered yet")
    if status.get("exit_code") is not None:
        report["ExitCode"] = status["exit_code"]
    return report


def queue_report(job) -> pd.Series:
    """What the scheduler says about ``job``: its fields from the watcher's last query (named as Slurm names them) for a
    Slurm job, the local supervisor's state for a local one. It asks no scheduler itself."""
    if job.backend == "slurm":
        fields = job.queue_fields()
        if not fields:
            return pd.Series(_without_fields(job.id, job.status()), name=job.name)
        return pd.Series({key: fields.get(key, "") for key in SCONTROL_FIELDS}, name=job.name)
    status = job.status()
    spec = job.record.get("spec", {})
    return pd.Series({"JobId": job.id, "JobName": job.name, "JobState": status["state"],
                      "Reason": status.get("reason", ""), "NumNodes": spec.get("nodes"),
                      "NodeList": "this machine (emulated nodes)", "ExitCode": status.get("exit_code"),
                      "StdOut": str(job.log_path)}, name=job.name)
