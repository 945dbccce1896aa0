"""The Slurm values a job passes on, checked: names (partition, account, qos), time limits and the sbatch
options a user may add. Every check raises a one-line :class:`ConfigError` naming the field and the fix."""

from __future__ import annotations

import re

from tutorial_lib.engine.config import ConfigError, shorten
from tutorial_lib.numbers import shown

# Slurm's six time forms (sbatch(1) --time; parse_time.c): minutes, minutes:seconds, hours:minutes:seconds,
# days-hours, days-hours:minutes, days-hours:minutes:seconds. Matched whole with re.fullmatch (`$` alone would also
# match before a final newline). Slurm adds up fields out of range (99:99:99 is 4-04:41:00): refused here.
# re.ASCII: Slurm reads the digits 0-9 only, while \d (and int()) would take '٣0' (Arabic-Indic digits) as 30.
_TIME = re.compile(r"(?P<days>\d{1,3})-(?P<hours>\d{1,2})(:(?P<minutes>\d{1,2})(:(?P<seconds>\d{1,2}))?)?"
                   r"|(?P<h>\d{1,4}):(?P<m>\d{1,2}):(?P<s>\d{1,2})"
                   r"|(?P<lead>\d{1,6})(:(?P<lead_s>\d{1,2}))?", re.ASCII)
_FIELD_LIMITS = (("hours", 24), ("minutes", 60), ("seconds", 60), ("m", 60), ("s", 60), ("lead_s", 60))
MAX_SIGNAL_LEAD_S = 65535  # sbatch(1) --signal: sig_time is an integer between 0 and 65535
MIN_SIGNAL_LEAD_S = 1  # a warning 0 s before the limit comes with the kill: no time to checkpoint
_SIGNAL = re.compile(r"--signal=B:USR1@[0-9]{1,5}")
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SBATCH_OPTION = re.compile(r"--[a-z][a-z-]{1,30}(=[A-Za-z0-9_.:,@+/-]{1,200})?")
# sbatch_options: only these full sbatch option names (sbatch takes an exact name as itself, while it would
# resolve an abbreviation such as --outp or --export-f to an option the library must control).
SBATCH_ALLOWED = ("--begin", "--comment", "--constraint", "--contiguous", "--core-spec", "--cores-per-socket",
                  "--cpu-freq", "--cpus-per-gpu", "--cpus-per-task", "--deadline", "--delay-boot", "--exclude",
                  "--exclusive", "--gpu-bind", "--gpu-freq", "--gres", "--gres-flags", "--hint", "--hold",
                  "--licenses", "--mail-type", "--mail-user", "--mem", "--mem-bind", "--mem-per-cpu",
                  "--mem-per-gpu", "--mincpus", "--nice", "--nodelist", "--oversubscribe", "--power", "--prefer",
                  "--priority", "--qos", "--reservation", "--signal", "--sockets-per-node", "--spread-job",
                  "--switches", "--thread-spec", "--threads-per-core", "--time-min", "--tmp", "--wckey")
SBATCH_TIMES = ("--time-min",)  # allowed options whose value is a Slurm time (--time itself is set here)
# What tutorial_lib.jobs and train.sbatch set themselves (named in messages, and never passed on).
SBATCH_SET_HERE = ("--parsable", "--job-name", "--nodes", "--ntasks-per-node", "--time", "--chdir", "--output",
                   "--export", "--partition", "--account", "--gpus-per-node", "--dependency", "--open-mode",
                   "--requeue")


def check_time(value: str | int, what: str = "time") -> str:
    """A Slurm time limit in one of Slurm's forms (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), each
    field after the first within its range (hours < 24 after days, minutes and seconds < 60): Slurm would add up
    the rest silently, so the limit would not be the one written. ``what`` names the field in the message (an
    sbatch option's value: ``sbatch_options: --time-min=...``)."""
    huge = isinstance(value, int) and value.bit_length() > 64  # r43x: str() of 5,000 digits is Python's ValueError
    text = "" if huge else str(value).strip(" ")
    fields = _TIME.fullmatch(text) if not isinstance(value, bool) else None
    if fields is None:
        raise ConfigError(f"{what}: {shorten(value)} is not a Slurm time limit. Fix: use minutes (30), "
                          "HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00).")
    over = next(((name, limit) for name, limit in _FIELD_LIMITS
                 if fields[name] is not None and int(fields[name]) >= limit), None)
    if over is not None:
        unit = {"hours": "hours"}.get(over[0], "minutes" if over[0] in ("minutes", "m") else "seconds")
        read = format_time(_seconds(fields))
        meaning = "run the job for" if what == "time" else "read it as"
        raise ConfigError(f"{what}: {shorten(value)} has {unit} {int(fields[over[0]])}, not below {over[1]}: Slurm "
                          f"would add it up and {meaning} {read}. Fix: write the limit you mean with each field "
                          f"in range, e.g. {read} (D-HH:MM:SS).")
    return text


def _seconds(fields: re.Match) -> int:
    """Seconds of a matched time, added up as Slurm adds them."""
    n = {key: int(value) for key, value in fields.groupdict().items() if value is not None}
    if "days" in n:
        return ((n["days"] * 24 + n["hours"]) * 60 + n.get("minutes", 0)) * 60 + n.get("seconds", 0)
    if "h" in n:
        return (n["h"] * 60 + n["m"]) * 60 + n["s"]
    return n["lead"] * 60 + n.get("lead_s", 0)


def format_time(seconds: int) -> str:
    """``seconds`` as Slurm shows a limit, rounded up to whole minutes: ``HH:MM:SS``, or ``D-HH:MM:SS``."""
    minutes = -(-max(int(seconds), 0) // 60)
    days, minutes = divmod(minutes, 24 * 60)
    text = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
    return f"{days}-{text}" if days else text


DEFAULT_WARNING_LEAD_S = 120  # train.sbatch's #SBATCH --signal=B:USR1@120


def warning_lead_seconds(sbatch_options) -> int:
    """Seconds before the time limit at which Slurm warns the batch script (the last ``--signal`` given wins)."""
    leads = [int(o.rsplit("@", 1)[1]) for o in sbatch_options if _SIGNAL.fullmatch(o)]
    return leads[-1] if leads else DEFAULT_WARNING_LEAD_S


def check_time_against_warning(time: str, sbatch_options) -> None:
    """Refuse a Slurm time limit that leaves the job less time before its warning than the warning's lead
    (``--signal=B:USR1@<lead>`` may come at most halfway through the limit): a warning at once or a few seconds
    in makes the job checkpoint, requeue and start again until it finishes in several times the time (seen: 3
    requeues; 1:00:00 with a lead of 3590 s would be warned 10 s after it starts). A ``--time-min`` among the
    options must not be longer than the limit."""
    limit, lead = time_limit_seconds(time), warning_lead_seconds(sbatch_options)
    if limit < 2 * lead:
        ran = f"after {limit - lead} s" if limit > lead else "at once"
        raise ConfigError(f"time: {time} ({limit} s) leaves too little time to train: Slurm warns the job {lead} s "
                          f"before its limit (--signal=B:USR1@{lead}), {ran}, and the job then stops to checkpoint "
                          "and requeues; the warning may come at most halfway through the limit. Fix: a longer time "
                          f"limit, e.g. '{time_for_warning(lead)}' (at least twice the warning's {lead} s), or a "
                          f"shorter warning in sbatch_options ('--signal=B:USR1@{limit // 2}').")
    for option in sbatch_options:
        name, _, value = option.partition("=")
        if name == "--time-min" and time_limit_seconds(value) > limit:
            raise ConfigError(f"sbatch_options: --time-min={value} is longer than the job's time limit {time} "
                              "(Slurm refuses the job at submission). Fix: a --time-min at most the time limit, "
                              f"e.g. '--time-min={time}', or a longer time.")


def time_for_warning(lead: int) -> str:
    """A time limit whose warning ``lead`` seconds before the end comes at most halfway, after at least 10 minutes
    of training (the example :func:`check_time_against_warning` suggests: a limit :func:`check_time` accepts)."""
    return format_time(max(2 * lead, lead + 600))


def time_limit_seconds(text: str) -> int:
    """Seconds in a Slurm time string (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS), as Slurm reads it."""
    fields = _TIME.fullmatch(str(text).strip(" "))
    if fields is None:
        raise ConfigError(f"time: {shorten(text)} is not a Slurm time limit. Fix: use minutes (30), HH:MM:SS "
                          "(01:30:00) or D-HH:MM:SS (1-00:00:00).")
    return _seconds(fields)


def check_word(what: str, value: str | None) -> str | None:
    """``value`` if it is a valid Slurm name for ``what`` (or None; a whole number, as YAML reads ``account: 1234``,
    as its text), else a one-line ConfigError. YAML reads ``partition: yes`` as true: refused, not sent as "True"."""
    if isinstance(value, bool) or (value is not None and not isinstance(value, (str, int))):
        raise ConfigError(f"{what}: {shorten(value)} ({type(value).__name__}) is not a Slurm {what} name. Fix: give "
                          f"the name as text (in YAML quote it: {what}: 'yes').")
    if isinstance(value, int):
        value = shown(value)  # r43y: str() of 5,000 digits raised; that text is no name, and is refused below
    if value is not None and (not _SLURM_WORD.fullmatch(value) or ".." in value or value.startswith("-")):
        raise ConfigError(f"{what}: {shorten(value)} is not a valid Slurm {what} name (ASCII letters, digits, '_', "
                          f"'.', '-', not starting with '-', which sbatch would read as an option). Fix: pass the "
                          f"{what} name exactly as `sinfo`/`sacctmgr` show it.")
    return value


def check_sbatch_option(option: str) -> str:
    """``option`` if a user may pass it to sbatch (full name, allowed, plain value), else a one-line ConfigError."""
    if not isinstance(option, str) or not _SBATCH_OPTION.fullmatch(option):
        raise ConfigError(f"sbatch_options: {shorten(option)} is refused: only --name or --name=value options made "
                          "of letters, digits and _.:,@+/- are passed. Fix: e.g. sbatch_options=['--gres=gpu:4', "
                          "'--exclusive'].")
    name = option.split("=", 1)[0]
    if name in SBATCH_ALLOWED:
        if name == "--signal" and not (_SIGNAL.fullmatch(option)
                                       and MIN_SIGNAL_LEAD_S <= int(option.rsplit("@", 1)[1]) <= MAX_SIGNAL_LEAD_S):
            raise ConfigError(f"sbatch_options: {shorten(option)}: train.sbatch needs its warning as "
                              f"--signal=B:USR1@<seconds>, {MIN_SIGNAL_LEAD_S} to {MAX_SIGNAL_LEAD_S} (sbatch's "
                              "range; at 0 the warning comes with the kill, too late to checkpoint). "
                              "Fix: e.g. '--signal=B:USR1@300' (or leave it out: 120 s).")
        if name in SBATCH_TIMES:  # read as Slurm reads a time, like the site's and the job's time (r43g)
            check_time(option.partition("=")[2], f"sbatch_options: {name}")
        return option
    meant = [full for full in SBATCH_SET_HERE + SBATCH_ALLOWED if full.startswith(name)]
    if name in SBATCH_SET_HERE or any(full in SBATCH_SET_HERE for full in meant):
        full = name if name in SBATCH_SET_HERE else next(f for f in meant if f in SBATCH_SET_HERE)
        problem = f"{name} is set by tutorial_lib.jobs itself" + (f" (it abbreviates {full})" if full != name else "")
        fix = "use submit()'s own arguments (name, nodes, time, partition, account, output_root)"
    elif len(meant) == 1:
        problem, fix = f"{name} is an abbreviation", f"write the full option name, {meant[0]}"
    else:
        problem = f"{name} is not among the sbatch options passed on"
        fix = f"use one of tutorial_lib.jobs.slurm_values.SBATCH_ALLOWED, e.g. {', '.join(SBATCH_ALLOWED[15:22])}"
    raise ConfigError(f"sbatch_options: {problem}. Fix: {fix}.")


def is_job_id(value) -> bool:
    """Whether ``value`` is a Slurm job id as sbatch prints one: a number of at most 10 ASCII digits (Slurm's ids
    are 32-bit). Anything else in a record (its pending placeholder, a changed or damaged one: 5,000 digits made
    ``int()`` raise) means no job of this record ran on the cluster."""
    return re.fullmatch(r"[0-9]{1,10}", shown(value) if isinstance(value, int) else str(value)) is not None

