"""Watch training jobs live: one figure, updated in place, until the jobs end.

    from tutorial_lib.figures import monitor
    table = monitor.watch(jobs)                  # blocks; returns the final job table
    table = await monitor.watch_async(jobs)      # the same, and the Cancel buttons act at once

In a notebook kernel the figure (throughput, loss, top-1/top-5, job states) is one display output
that is replaced as metrics arrive, so an executed notebook (papermill, nbclient, nbval) keeps
exactly one figure: the last one. Outside a kernel, watch prints a status line per change.

Cancel buttons are shown only where a person is looking (see :func:`live_frontend`). A kernel
handles button clicks only between cells or while an async cell awaits: during the blocking
``watch()`` the buttons stay disabled until watching stops (interrupt the kernel with the stop
button: the jobs keep running and the buttons then act on them); under ``await watch_async()``
they act at once. A click after watching has stopped waits for the job to end and redraws, so the
figure and the buttons never go stale.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import time
from pathlib import Path

import pandas as pd

from tutorial_lib.figures import plots
from tutorial_lib.jobs.spec import check_seconds
from tutorial_lib.jobs.states import FINAL_STATES
from tutorial_lib.rundir.layout import METRICS_FILE
from tutorial_lib.rundir.metrics import read_metrics

HEADLESS_RUNNERS = ("papermill", "nbclient", "nbconvert", "nbval", "pytest", "jupyter-execute")
CONTROLS_ENV = "TUTORIAL_MONITOR_CONTROLS"  # "1" / "0" forces cancel controls on / off


# ------------------------------------------------------------ environment
def _kernel_shell():
    """The IPython shell when running inside a Jupyter kernel (not a terminal IPython), else None."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    return shell if getattr(shell, "kernel", None) is not None else None


def _parent_command() -> list[str]:
    """The command line of the process that launched this kernel (Linux /proc), or []."""
    pid = os.environ.get("JPY_PARENT_PID") or str(os.getppid())
    try:
        return Path(f"/proc/{int(pid)}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (OSError, ValueError):
        return []


def live_frontend() -> bool:
    """Whether a person is probably looking at this kernel's output with a widget-capable frontend.

    Conservative; all of these must hold:

    * ``TUTORIAL_MONITOR_CONTROLS=1``/``0`` in the environment decides outright, if set;
    * the code runs in a Jupyter kernel (not plain Python, not terminal IPython);
    * no sign of a batch run: no ``PAPERMILL*``, ``PYTEST_CURRENT_TEST`` or ``PYTEST_XDIST_WORKER`` variable, and the
      process that launched the kernel (``JPY_PARENT_PID``) is not papermill, nbclient, nbconvert,
      ``jupyter execute`` or pytest/nbval (papermill itself sets no variable in the kernel);
    * a sign of an interactive frontend: ``JPY_SESSION_NAME`` (set by jupyter_server for
      notebooks opened in JupyterLab / Notebook), VS Code's ``__vsc_ipynb_file__``, or Colab.
    """
    forced = os.environ.get(CONTROLS_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    shell = _kernel_shell()
    if shell is None:
        return False
    if any(key.startswith("PAPERMILL") for key in os.environ) or {"PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER"} & set(
            os.environ):  # PYTEST_XDIST_WORKER: a kernel started by a pytest-xdist worker (whose command is not pytest)
        return False
    launcher = " ".join(os.path.basename(arg) for arg in _parent_command()[:3]).lower()
    if any(runner in launcher for runner in HEADLESS_RUNNERS):
        return False
    return bool(os.environ.get("JPY_SESSION_NAME") or "__vsc_ipynb_file__" in getattr(shell, "user_ns", {})
                or "google.colab" in sys.modules)


# ----------------------------------------------------------------- monitor
def _as_list(jobs) -> list:
    return [jobs] if hasattr(jobs, "run_dir") else list(jobs)


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if pd.isna(value) else format(value, spec)


def status_line(row: dict) -> str:
    """One human line for a job-table row."""
    return (f"{time.strftime('%H:%M:%S')} {row['name']} ({row['id']}): {row['state']:<9} "
            f"epoch {_fmt(row['epoch'], 'd', '0')}/{_fmt(row['epochs'], 'd', '?')}  "
            f"top-1 {_fmt(row['top1'], '.1f')}%  {_fmt(row['images_per_sec'], ',.0f')} img/s (last epoch)")


class Monitor:
    """The jobs being watched, their last-read state and metrics, and the live figure.

    ``step()`` re-reads what changed and redraws at most once per ``refresh`` seconds, and only
    when a job's state or its metrics.jsonl (size, mtime) changed. ``notebook``: draw into an
    updating display output (default: when running in a Jupyter kernel); else print status lines.
    """

    def __init__(self, jobs, refresh: float = 2.0, notebook: bool | None = None):
        self.jobs = _as_list(jobs)
        if not self.jobs:
            raise ValueError("watch: no jobs given. Fix: pass a Job or a list of Jobs (from jobs.submit).")
        self.refresh = refresh
        self.notebook = _kernel_shell() is not None if notebook is None else notebook
        self.states: dict[str, str] = {}
        self.events: dict[str, list[dict]] = {job.id: [] for job in self.jobs}
        self.draws = 0
        self._signatures: dict[str, tuple] = {}
        self._printed: dict[str, tuple] = {}
        self._dirty, self._last_draw = False, float("-inf")
        self._figure = self._handle = self._buttons = self._note = None
        self._controls_active = False
        self.watching = False  # True while a watch loop polls and redraws; else a Cancel click redraws

    # ----------------------------------------------------------- reading
    def poll(self) -> bool:
        """Re-read job states and changed metrics files; True if anything changed since the last poll."""
        changed = False
        for job in self.jobs:
            state = job.state
            try:
                stat = (job.run_dir / METRICS_FILE).stat()
                metrics_sig = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                metrics_sig = None
            if self._signatures.get(job.id) != (state, metrics_sig):
                if self._signatures.get(job.id, (None, None))[1] != metrics_sig:
                    self.events[job.id] = read_metrics(job.run_dir) if metrics_sig is not None else []
                self._signatures[job.id] = (state, metrics_sig)
                self.states[job.id] = state
                changed = True
        return changed

    def all_done(self) -> bool:
        """True once every job is COMPLETED, FAILED, CANCELLED or TIMEOUT (as last polled)."""
        return all(self.states.get(job.id) in FINAL_STATES for job in self.jobs)

    def table(self) -> pd.DataFrame:
        """The job table (see :func:`tutorial_lib.figures.plots.job_table`) from the last poll."""
        return plots.table_from_rows([plots.job_row(job, self.states.get(job.id, "PENDING"), self.events[job.id])
                                      for job in self.jobs])

    def runs(self) -> dict[str, pd.DataFrame]:
        """``{label: DataFrame of all events}`` per job, for the plots (labels made unique)."""
        names = [job.name for job in self.jobs]
        return {(job.name if names.count(job.name) == 1 else f"{job.name} ({job.id})"):
                pd.DataFrame.from_records(self.events[job.id]) for job in self.jobs}

    # ----------------------------------------------------------- drawing
    def step(self, force: bool = False) -> bool:
        """Poll, then redraw if something changed and ``refresh`` seconds passed (or ``force``)."""
        self._dirty |= self.poll()
        if self._dirty and (force or time.monotonic() - self._last_draw >= self.refresh):
            self.draw()
            return True
        return False

    def figure(self):
        """The 2x2 figure (throughput, loss, accuracy, job table) drawn from the last poll."""
        from matplotlib.figure import Figure  # not pyplot: the inline backend never shows a stray copy

        if self._figure is None:
            self._figure = Figure(figsize=(12, 8), layout="constrained")
        return draw_jobs(self._figure, self.runs(), self.table(), self.all_done())

    def draw(self) -> None:
        """Show the current state: replace the notebook figure, or print a line per changed job."""
        self._dirty, self._last_draw = False, time.monotonic()
        self.draws += 1
        if not self.notebook:
            for row in self.table().to_dict("records"):
                key = (row["state"], row["epoch"])
                if self._printed.get(row["id"]) != key:
                    self._printed[row["id"]] = key
                    print(status_line(row), flush=True)
            return
        from IPython.display import Image, display

        buffer = io.BytesIO()
        self.figure().savefig(buffer, format="png", dpi=72)
        image = Image(data=buffer.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)
        self._update_controls()

    # ---------------------------------------------------------- controls
    def show_controls(self, active: bool) -> None:
        """Display a Cancel button per job (ipywidgets); ``active=False`` shows them disabled for now."""
        import ipywidgets as widgets
        from IPython.display import display

        self._buttons = {}
        for job in self.jobs:
            button = widgets.Button(description=f"Cancel {job.name}", button_style="danger", icon="stop",
                                    layout=widgets.Layout(width="auto"), tooltip=f"cancel job {job.id}")
            button.on_click(lambda _button, job=job: self._cancel(job))
            self._buttons[job.id] = button
        self._note = widgets.Label()
        self.set_controls_active(active)
        display(widgets.VBox([widgets.HBox(list(self._buttons.values())), self._note]))

    def set_controls_active(self, active: bool) -> None:
        """Enable the buttons of live jobs (``active``), or disable them all with a note saying why."""
        self._controls_active = active
        if self._note is not None:
            self._note.value = "" if active else ("Buttons act once watching stops: interrupt the kernel (stop "
                                                  "button) to stop watching now; the jobs keep running.")
        self._update_controls()

    def _update_controls(self) -> None:
        for job in self.jobs if self._buttons else ():
            button, state = self._buttons[job.id], self.states.get(job.id)
            if state in FINAL_STATES:
                button.description, button.button_style = f"{job.name}: {state}", ""
            button.disabled = state in FINAL_STATES or not self._controls_active

    def _cancel(self, job, wait: float = 60.0) -> None:
        """A Cancel click: while watching, request it (the watch loop redraws); after watching stopped
        (an interrupted ``watch``), wait up to ``wait`` s for the job to end, then redraw here."""
        self._buttons[job.id].disabled = True
        self._buttons[job.id].description = f"cancelling {job.name}..."
        try:
            job.cancel(wait=0 if self.watching else wait)
            self._note.value = f"cancel requested for {job.name} ({job.id})"
        except Exception as exc:  # shown in the widget: a callback's exception would be lost
            self._note.value = f"could not cancel {job.name}: {exc}"
            self._buttons[job.id].disabled = False
            return
        if not self.watching:
            self.step(force=True)
            self._update_controls()
            if self.states.get(job.id) not in FINAL_STATES:
                self._note.value = f"cancel requested for {job.name} ({job.id}); it has not ended yet"

    # ------------------------------------------------------------ ending
    def finish(self, why: str | None, save: str | os.PathLike | None = None) -> pd.DataFrame:
        """Draw the final state, say why watching stopped, save the figure if asked; return the table, its rate
        column named for what it is (:data:`tutorial_lib.figures.plots.LAST_EPOCH_RATE`)."""
        self.watching = False
        self.step(force=True)
        if self._buttons is not None:
            self.set_controls_active(True)
        if why:
            live = [job.name for job in self.jobs if self.states.get(job.id) not in FINAL_STATES]
            print(f"watch: {why}; still running: {', '.join(live)} (the jobs keep running: watch again, "
                  "or job.cancel())", flush=True)
        if save is not None:
            self.figure().savefig(save, dpi=100)
        return self.table().rename(columns={"images_per_sec": plots.LAST_EPOCH_RATE})


def draw_jobs(fig, runs: dict[str, pd.DataFrame], table: pd.DataFrame, ended: bool):
    """Draw the monitor's figure into ``fig`` (cleared first): throughput, loss and accuracy of ``runs``
    (``{label: DataFrame of all events}``), the job table, and one legend for all panels, below them, where it
    covers no curve (a run has one colour in every panel). Empty panels say why: waiting, or, once every job
    has ``ended``, what no job logged. Returns ``fig``."""
    fig.clear()
    axes = fig.subplots(2, 2)
    fig.legends.clear()
    waiting = "waiting for metrics..."
    plots.plot_throughput(runs, axes[0][0], empty_note="no step logged" if ended else waiting, legend=False)
    plots.plot_loss(runs, axes[0][1], empty_note="no step logged" if ended else waiting, legend=False)
    plots.plot_accuracy(runs, axes[1][0], empty_note="no epoch finished" if ended else waiting, legend=False,
                       name_missing=False)
    _draw_table(axes[1][1], table)
    handles = {}
    for ax in axes.flat[:3]:
        for line in ax.lines:
            name = line.get_label().removesuffix(" top-1").removesuffix(" top-5")
            if not name.startswith("_") and name not in handles:
                handles[name] = line
    if handles:
        from matplotlib.lines import Line2D

        keys = [Line2D([], [], color=line.get_color(), linewidth=2) for line in handles.values()]
        fig.legend(keys, list(handles), loc="outside lower center", ncols=min(4, len(handles)), fontsize="small",
                   title=_legend_title(axes.flat[:3]), title_fontsize="small")
    counts = table["state"].value_counts()
    fig.suptitle(f"{len(table)} job(s): " + ", ".join(f"{n} {s}" for s, n in counts.items())
                 + f"   (updated {time.strftime('%H:%M:%S')})")
    return fig


def _legend_title(panels) -> str:
    """The monitor legend's title: how to read the curves, and the coinciding lines of a panel whose title had no
    room to name them (:func:`tutorial_lib.figures.readable.mark_coinciding`), each after its panel's name."""
    import textwrap

    from tutorial_lib.figures.readable import coinciding_notes, named_elsewhere

    lines = ["runs (top-1 solid, top-5 dashed)"]
    for ax in panels:
        if named_elsewhere(ax):
            lines += textwrap.wrap(f"{ax.get_title().splitlines()[0]}: {'; '.join(coinciding_notes(ax))}", 140)
    return "\n".join(lines)


def _draw_table(ax, table: pd.DataFrame) -> None:
    ax.axis("off")
    ax.set_title("Jobs")
    cells = [[row["name"], row["state"], f"{_fmt(row['epoch'], 'd', '0')}/{_fmt(row['epochs'], 'd', '?')}",
              _fmt(row["top1"], ".1f"),
              _fmt(row["images_per_sec"], ",.0f")] for row in table.to_dict("records")]
    drawn = ax.table(cellText=cells, colLabels=["job", "state", "epoch", "top-1 (%)", plots.LAST_EPOCH_RATE],
                     loc="upper center", cellLoc="left")
    drawn.auto_set_font_size(False)
    drawn.set_fontsize(9)
    drawn.auto_set_column_width(list(range(5)))  # long job names are shown whole, not cut
    drawn.scale(1, 1.4)


def _loop(monitor: Monitor, timeout: float | None):
    """Yield the seconds to wait between polls; the return value says why it stopped (None: all ended)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    monitor.watching = True
    while True:
        monitor.step()
        if monitor.all_done():
            return None
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return f"stopped after the {timeout:g} s timeout"
        yield monitor.refresh if left is None else min(monitor.refresh, left)


def _start(jobs, timeout, refresh, cancel_controls, controls, active) -> Monitor:
    check_seconds("timeout", timeout)  # r43s: watch(timeout='10') was a TypeError, refresh=-1 a ValueError of sleep
    check_seconds("refresh", refresh, allow_none=False, positive=True)
    monitor = Monitor(jobs, refresh)
    if monitor.notebook and cancel_controls and (live_frontend() if controls is None else controls):
        monitor.step(force=True)  # the figure first, the buttons below it
        monitor.show_controls(active)
    return monitor


def watch(jobs, timeout: float | None = None, refresh: float = 2.0, cancel_controls: bool = True,
          controls: bool | None = None, save: str | os.PathLike | None = None) -> pd.DataFrame:
    """Follow one Job or a list of Jobs live until all have ended; return the final job table.

    ``timeout``: stop watching after this many seconds (says so; the jobs keep running; no error).
    ``refresh``: poll every ``refresh`` s and redraw only when a state or metrics file changed.
    ``cancel_controls``: offer a Cancel button per job where a person is looking; ``controls``
    overrides that detection (None: :func:`live_frontend`). ``save``: also write the final figure
    to this path (PNG, PDF...). In a notebook kernel, interrupting the kernel stops watching.
    """
    monitor = _start(jobs, timeout, refresh, cancel_controls, controls, active=False)
    loop, why = _loop(monitor, timeout), None
    try:
        while True:
            time.sleep(next(loop))
    except StopIteration as stop:
        why = stop.value
    except KeyboardInterrupt:
        if not monitor.notebook:
            raise
        why = "interrupted"
    return monitor.finish(why, save)


async def watch_async(jobs, timeout: float | None = None, refresh: float = 2.0, cancel_controls: bool = True,
                      controls: bool | None = None, save: str | os.PathLike | None = None) -> pd.DataFrame:
    """:func:`watch` as a coroutine (``await monitor.watch_async(jobs)`` in a notebook cell).

    While it awaits, a kernel that dispatches widget messages during async cells (ipykernel 7.4
    does) runs the Cancel buttons at once; older kernels run the clicks when the cell ends.
    """
    monitor = _start(jobs, timeout, refresh, cancel_controls, controls, active=True)
    loop, why = _loop(monitor, timeout), None
    try:
        while True:
            await asyncio.sleep(next(loop))
    except StopIteration as stop:
        why = stop.value
    return monitor.finish(why, save)


def epoch_line(name: str, record: dict) -> str:
    """One human line for an ``epoch`` event."""
    return (f"{name} epoch {record.get('epoch')}: train loss {_fmt(record.get('train_loss'), '.3f')}  "
            f"val loss {_fmt(record.get('val_loss'), '.3f')}  top-1 {_fmt(record.get('top1'), '.1f')}%  "
            f"top-5 {_fmt(record.get('top5'), '.1f')}%  {_fmt(record.get('images_per_sec'), ',.0f')} img/s  "
            f"({_fmt(record.get('epoch_time'), '.0f')} s)")


def follow(job, every: float = 5.0, timeout: float | None = None) -> str:
    """Print each new epoch of ``job`` as it is logged, until the job ends (or ``timeout`` s); return its state."""
    check_seconds("every", every, allow_none=False, positive=True)
    check_seconds("timeout", timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    printed = 0
    while True:
        state = job.state  # before reading the metrics, so the last epochs of a finished job are printed
        epochs = [record for record in job.events() if record["event"] == "epoch"]
        for record in epochs[printed:]:
            print(epoch_line(job.name, record), flush=True)
        printed = len(epochs)
        if state in FINAL_STATES:
            print(f"{job.name} ({job.id}): {state}", flush=True)
            return state
        if deadline is not None and time.monotonic() >= deadline:
            print(f"follow: stopped after the {timeout:g} s timeout; {job.name} is {state} and keeps running")
            return state
        time.sleep(every if deadline is None else max(0.0, min(every, deadline - time.monotonic())))
