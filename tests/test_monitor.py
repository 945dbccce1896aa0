"""Tests of tutorial_lib.figures.monitor and tutorial_lib.figures.plots on fake run directories (no training).

A fake ``local`` job is a run directory with job.json, job_state.json and metrics.jsonl; its
supervisor_pid is this test process, so a RUNNING job counts as alive. The notebook tests start a
real kernel (the venv's ``python3`` kernelspec): run with ``.venv/bin/python -m pytest``.
"""

from __future__ import annotations

import json
import os
import queue
import textwrap
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tests.conftest import start_fake_supervisor, write_live_state  # noqa: E402
from tutorial_lib import REPO_ROOT  # noqa: E402
from tutorial_lib.figures import monitor, plots  # noqa: E402
from tutorial_lib.jobs import Job  # noqa: E402
from tutorial_lib.jobs.record import write_job_file  # noqa: E402
from tutorial_lib.jobs.supervisor import write_state  # noqa: E402
from tutorial_lib.rundir.layout import METRICS_FILE, STATE_FILE  # noqa: E402
from tutorial_lib.rundir.metrics import MetricsWriter  # noqa: E402

JUPYTER_HINT = "the Jupyter test tools are missing: `make setup` (or pip install -e '.[test]')"


def add_epoch(run_dir: Path, epoch: int, top1: float, steps_per_epoch: int = 4, rate: float = 100.0) -> None:
    """Append one epoch's step events and its epoch event, as train.py writes them."""
    writer = MetricsWriter(run_dir)
    for i in range(steps_per_epoch):
        step = (epoch - 1) * steps_per_epoch + i + 1
        writer.write("step", epoch=epoch, step=step, loss=5.0 - 0.1 * step, lr=0.1, images_per_sec=rate + step)
    writer.write("epoch", epoch=epoch, train_loss=5.0 - epoch, val_loss=5.2 - epoch, top1=top1, top5=top1 + 20,
                 epoch_time=3.0, images_per_sec=rate, lr=0.1)


def make_job(root: Path, name: str, state: str = "COMPLETED", top1s=(10.0, 20.0), world_size: int = 2,
             supervisor_pid: int | None = None) -> Job:
    """A fake local job: job.json, job_state.json and metrics.jsonl with one epoch per ``top1s`` value."""
    run_dir = root / name
    write_job_file(run_dir, {"backend": "local", "id": f"local-{name}", "name": name, "time": "00:10:00",
                             "spec": {"nodes": 1, "ranks_per_node": world_size},
                             "supervisor_pid": supervisor_pid or os.getpid()})
    exit_code = 0 if state == "COMPLETED" else (1 if state == "FAILED" else None)
    if state in ("PENDING", "RUNNING") and supervisor_pid is None:
        write_job_file(run_dir, {"backend": "local", "id": f"local-{name}", "name": name, "time": "00:10:00",
                                 "spec": {"nodes": 1, "ranks_per_node": world_size},
                                 "supervisor_pid": write_live_state(run_dir, state, exit_code=exit_code)})
    else:
        write_state(run_dir, state, exit_code=exit_code)
    MetricsWriter(run_dir).write("start", world_size=world_size, global_batch=64 * world_size, scaled_lr=0.1,
                                 hosts=["node0"], steps_per_epoch=4, epochs=3)
    for epoch, top1 in enumerate(top1s, start=1):
        add_epoch(run_dir, epoch, top1)
    return Job(run_dir)


def finish_later(job: Job, delay: float, top1: float, state: str = "COMPLETED") -> threading.Thread:
    """In the background: after ``delay`` s log one more epoch, then end the job in ``state``."""
    def work():
        time.sleep(delay)
        epoch = sum(1 for e in job.events() if e["event"] == "epoch") + 1
        add_epoch(job.run_dir, epoch, top1)
        write_state(job.run_dir, state, exit_code=0)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------ watch
def test_watch_returns_final_table_when_all_jobs_have_ended(tmp_path, capsys):
    jobs = [make_job(tmp_path, "a", "COMPLETED", top1s=(12.5, 31.0), world_size=4),
            make_job(tmp_path, "b", "FAILED", top1s=(8.0,), world_size=1)]
    started = time.monotonic()
    table = monitor.watch(jobs, timeout=60, refresh=0.05)
    assert time.monotonic() - started < 50  # returned when the jobs had ended, not at its timeout
    assert list(table["name"]) == ["a", "b"]
    assert list(table["id"]) == ["local-a", "local-b"]
    assert list(table["state"]) == ["COMPLETED", "FAILED"]
    assert list(table["top1"]) == [31.0, 8.0]
    assert list(table["epoch"]) == [2, 1]
    assert list(table["world_size"]) == [4, 1]
    assert list(table["backend"]) == ["local", "local"]
    # the last epoch's global rate, as the summaries report it (the last step event's rate was 108.0)
    assert table.loc[0, "img/s, last epoch"] == 100.0  # named for what it is (issue 44: the tables show means)
    out = capsys.readouterr().out
    status = [line for line in out.splitlines() if "(local-" in line]  # outside IPython: one line per change
    assert len(status) == 2 and "COMPLETED" in status[0] and "FAILED" in status[1]
    assert "timeout" not in out


def test_watch_returns_on_timeout_while_a_job_runs(tmp_path, capsys):
    job = make_job(tmp_path, "slow", "RUNNING", top1s=(5.0,))
    assert job.state == "RUNNING"  # its supervisor (this process) is alive
    started = time.monotonic()
    table = monitor.watch(job, timeout=1.0, refresh=0.2)
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 60  # at its timeout, not at the job's end (it never ends): a generous ceiling
    assert list(table["state"]) == ["RUNNING"]
    assert table.loc[0, "top1"] == 5.0
    out = capsys.readouterr().out
    assert "timeout" in out and "still running: slow" in out


def test_watch_follows_a_job_until_it_completes(tmp_path):
    job = make_job(tmp_path, "live", "RUNNING", top1s=(5.0,))
    finish_later(job, 0.6, top1=42.0)
    table = monitor.watch(job, timeout=20, refresh=0.1)
    assert list(table["state"]) == ["COMPLETED"]
    assert table.loc[0, "top1"] == 42.0 and table.loc[0, "epoch"] == 2


def test_watch_survives_a_torn_last_metrics_line(tmp_path):
    job = make_job(tmp_path, "torn", "COMPLETED", top1s=(10.0, 20.0))
    with open(job.run_dir / METRICS_FILE, "a") as handle:
        handle.write('{"event": "epoch", "epoch": 3, "top1": 99')  # a writer killed mid-line
    table = monitor.watch(job, timeout=10, refresh=0.05)
    assert table.loc[0, "top1"] == 20.0 and table.loc[0, "epoch"] == 2
    assert table.loc[0, "state"] == "COMPLETED"


def test_watch_saves_the_final_figure(tmp_path):
    job = make_job(tmp_path, "saved")
    target = tmp_path / "final.png"
    monitor.watch(job, timeout=10, refresh=0.05, save=target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------- redrawing
def test_redraw_only_when_metrics_or_state_change(tmp_path):
    job = make_job(tmp_path, "r", "RUNNING", top1s=(5.0,))
    mon = monitor.Monitor(job, refresh=0.0, notebook=False)
    assert mon.step() and mon.draws == 1  # first look
    assert not mon.step() and not mon.step() and mon.draws == 1  # nothing changed: no redraw
    add_epoch(job.run_dir, 2, 15.0)
    assert mon.step() and mon.draws == 2  # metrics appended between polls
    assert mon.table().loc[0, "top1"] == 15.0
    assert not mon.step() and mon.draws == 2
    with open(job.run_dir / METRICS_FILE, "a") as handle:
        handle.write('{"event": "step", "ep')  # torn line: the file changed, the metrics read fine
    assert mon.step() and mon.table().loc[0, "top1"] == 15.0
    write_state(job.run_dir, "CANCELLED")
    assert mon.step() and mon.draws == 4 and mon.all_done()


def test_redraws_are_throttled_to_one_per_refresh(tmp_path):
    job = make_job(tmp_path, "t", "RUNNING", top1s=(5.0,))
    mon = monitor.Monitor(job, refresh=3600.0, notebook=False)
    assert mon.step() and mon.draws == 1
    add_epoch(job.run_dir, 2, 15.0)
    assert not mon.step() and mon.draws == 1  # changed, but drawn less than `refresh` ago
    assert not mon.step() and mon.draws == 1
    assert mon.step(force=True) and mon.draws == 2  # the change was remembered (watch forces the last one)
    assert not mon.step(force=True) and mon.draws == 2  # nothing new: even a forced step does not redraw


def test_watch_draws_once_for_finished_jobs_and_again_per_change(tmp_path, monkeypatch):
    draws = []
    original = monitor.Monitor.draw
    monkeypatch.setattr(monitor.Monitor, "draw", lambda self: (draws.append(time.monotonic()), original(self)))
    monitor.watch(make_job(tmp_path, "done"), timeout=10, refresh=0.05)
    assert len(draws) == 1  # a finished job: one look, no redraws of unchanged files
    draws.clear()
    job = make_job(tmp_path, "running", "RUNNING", top1s=(5.0,))
    finish_later(job, 0.5, top1=30.0)
    monitor.watch(job, timeout=20, refresh=0.1)
    assert 2 <= len(draws) <= 3  # the first look, then the change(s): not one draw per poll (~5+ polls)


# ------------------------------------------------------------------ plots
@pytest.fixture
def two_jobs(tmp_path):
    yield [make_job(tmp_path, "one", top1s=(10.0, 20.0)), make_job(tmp_path, "two", top1s=(15.0,))]
    plt.close("all")


def test_run_plots_draw_one_line_per_job(two_jobs):
    ax = plots.plot_throughput(two_jobs)
    assert [line.get_label() for line in ax.lines] == ["one", "two"]
    assert list(ax.lines[0].get_xdata()) == list(range(1, 9)) and ax.lines[1].get_ydata()[-1] == 104.0
    assert "images/s" in ax.get_ylabel() and "step" in ax.get_xlabel()
    assert "all ranks" in ax.get_ylabel()  # the watched jobs run on GPUs or on CPU ranks: not "all GPUs"
    ax = plots.plot_loss(two_jobs)
    assert len(ax.lines) == 2 and "loss" in ax.get_ylabel()
    ax = plots.plot_accuracy(two_jobs)
    assert len(ax.lines) == 4  # top-1 and top-5 per job
    top1, top5 = ax.lines[0], ax.lines[1]
    assert top1.get_linestyle() == "-" and top5.get_linestyle() == "--" and top1.get_color() == top5.get_color()
    assert list(top1.get_ydata()) == [10.0, 20.0] and list(top5.get_ydata()) == [30.0, 40.0]
    assert "%" in ax.get_ylabel() and ax.get_xlabel() == "epoch"


def test_plots_accept_dataframes_and_an_existing_axes(two_jobs):
    fig, axes = plt.subplots(1, 2)
    runs = {"from frame": two_jobs[0].metrics("step"), "from records": two_jobs[1].events()}
    assert plots.plot_throughput(runs, axes[0]) is axes[0] and len(axes[0].lines) == 2
    assert len(plots.plot_accuracy({"x": two_jobs[0].metrics("epoch")}, axes[1]).lines) == 2
    empty = plots.plot_loss({"nothing yet": pd.DataFrame()})
    assert not empty.lines and "waiting" in empty.texts[0].get_text()


def test_lr_schedules_scaling_efficiency_and_bars():
    ax = plots.plot_lr_schedules({"step": [0.1] * 8, "cosine": [0.1, 0.09, 0.05, 0.01], "warmup": [0.0, 0.05]},
                                 steps_per_epoch=4)
    assert len(ax.lines) == 3 and ax.lines[0].get_xdata()[-1] == 7 / 4 and ax.get_xlabel() == "epoch"
    ax = plots.plot_scaling([4, 1, 2, 8], [3000.0, 1000.0, 1900.0, 5000.0])
    ideal, measured = ax.lines
    assert list(ideal.get_xdata()) == [1, 2, 4, 8] and list(ideal.get_ydata()) == [1000.0, 2000.0, 4000.0, 8000.0]
    assert list(measured.get_ydata()) == [1000.0, 1900.0, 3000.0, 5000.0]
    assert ax.get_xscale() == "log" and "images/s" in ax.get_ylabel()
    ax = plots.plot_efficiency([1, 2, 4], [1.0, 0.95, 0.75])
    assert len(ax.lines) == 2 and list(ax.lines[1].get_ydata()) == [100.0, 95.0, 75.0] and ax.get_xscale() == "log"
    ax = plots.plot_bars(["fp32", "amp"], [900.0, 2100.0], "throughput (images/s)")
    assert [p.get_height() for p in ax.patches] == [900.0, 2100.0] and ax.get_ylabel() == "throughput (images/s)"
    plt.close("all")


def test_job_table(two_jobs):
    table = plots.job_table(two_jobs)
    assert list(table.columns) == plots.TABLE_COLUMNS
    # images/s: the last finished epoch's rate (100 in add_epoch), not a step event's (101 to 108)
    assert table.to_dict("records")[0] == {
        "name": "one", "id": "local-one", "backend": "local", "state": "COMPLETED", "world_size": 2, "epoch": 2,
        "epochs": 3, "top1": 20.0, "images_per_sec": 100.0}


# ------------------------------------------------------- frontend detection
class FakeShell:
    kernel = object()
    user_ns: dict = {}


@pytest.mark.parametrize("env, launcher, kernel, expected", [
    ({"JPY_SESSION_NAME": "/home/u/course.ipynb"}, ["/venv/bin/python", "/venv/bin/jupyter-lab"], True, True),
    ({}, ["/venv/bin/python", "/venv/bin/jupyter-lab"], True, False),  # no sign of a notebook frontend
    ({"JPY_SESSION_NAME": "x.ipynb"}, ["/venv/bin/python", "/venv/bin/papermill", "in.ipynb"], True, False),
    ({"JPY_SESSION_NAME": "x.ipynb"}, ["python", "-m", "pytest", "--nbval"], True, False),
    ({"JPY_SESSION_NAME": "x.ipynb", "PAPERMILL_RUN": "1"}, ["jupyter-lab"], True, False),
    ({"JPY_SESSION_NAME": "x.ipynb"}, ["jupyter-lab"], False, False),  # plain Python: no kernel
    ({monitor.CONTROLS_ENV: "1"}, ["papermill"], True, True),  # explicit override
    ({monitor.CONTROLS_ENV: "0", "JPY_SESSION_NAME": "x.ipynb"}, ["jupyter-lab"], True, False),
])
def test_live_frontend_detection(monkeypatch, env, launcher, kernel, expected):
    for key in [k for k in os.environ if k.startswith(("JPY_", "PAPERMILL")) or k == monitor.CONTROLS_ENV]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this test may itself run in an xdist worker
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(monitor, "_kernel_shell", lambda: FakeShell() if kernel else None)
    monkeypatch.setattr(monitor, "_parent_command", lambda: launcher)
    assert monitor.live_frontend() is expected


# ------------------------------------------------------------ in a kernel
SETUP_CELL = """
import os, threading, time
from pathlib import Path
from tutorial_lib.figures import monitor
from tutorial_lib.jobs.record import write_job_file
from tutorial_lib.jobs import Job
from tutorial_lib.jobs.supervisor import write_state
from tutorial_lib.rundir.metrics import MetricsWriter

run_dir = Path({run_dir!r})
write_job_file(run_dir, {{"backend": "local", "id": "local-nb", "name": "nb", "time": "00:10:00",
                          "supervisor_pid": os.getpid(), "spec": {{"nodes": 1, "ranks_per_node": 2}}}})
write_state(run_dir, "RUNNING")
writer = MetricsWriter(run_dir)
writer.write("start", world_size=2, global_batch=128, scaled_lr=0.1, hosts=["n0"], steps_per_epoch=2, epochs=2)

def train():  # two epochs, then the job completes
    for epoch in (1, 2):
        time.sleep(0.4)
        for step in (1, 2):
            writer.write("step", epoch=epoch, step=2 * (epoch - 1) + step, loss=4.0 / step, lr=0.1,
                         images_per_sec=500.0)
        writer.write("epoch", epoch=epoch, train_loss=3.0, val_loss=3.1, top1=30.0 * epoch, top5=50.0 * epoch,
                     epoch_time=0.4, images_per_sec=500.0, lr=0.1)
    write_state(run_dir, "COMPLETED", exit_code=0)

threading.Thread(target=train).start()
"""

WATCH_CELL = """
draws = []
_draw = monitor.Monitor.draw
monitor.Monitor.draw = lambda self: (draws.append(1), _draw(self))
table = monitor.watch(Job(run_dir), timeout=30, refresh=0.1)
print("draws", len(draws), "live", monitor.live_frontend(), "state", table.loc[0, "state"],
      "top1", table.loc[0, "top1"])
"""


def _kernel_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")


def test_notebook_keeps_exactly_one_figure_output(tmp_path, monkeypatch):
    """Executed headless (nbclient), the figure is one display output updated in place, with no widgets."""
    nbformat = pytest.importorskip("nbformat", reason=JUPYTER_HINT)
    nbclient = pytest.importorskip("nbclient", reason=JUPYTER_HINT)
    _kernel_env(monkeypatch)
    # looks like papermill started from inside JupyterLab: detection must still see the batch runner
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "course.ipynb"))
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.delenv(monitor.CONTROLS_ENV, raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP_CELL.format(run_dir=str(tmp_path / "nb"))),
                nbformat.v4.new_code_cell(WATCH_CELL)]
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[1].outputs
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) == 1, [o.output_type for o in outputs]
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    fields = dict(zip(text.split()[::2], text.split()[1::2], strict=False))
    assert fields["live"] == "False" and fields["state"] == "COMPLETED" and fields["top1"] == "60.0"
    assert int(fields["draws"]) >= 2  # it was redrawn, yet there is one output: the last update




def test_cancel_button_cancels_a_job_while_watch_async_awaits(tmp_path, monkeypatch):
    """A real kernel: clicking the job's Cancel button during ``await watch_async`` cancels the job."""
    jupyter_client = pytest.importorskip("jupyter_client", reason=JUPYTER_HINT)
    _kernel_env(monkeypatch)
    monkeypatch.setenv(monitor.CONTROLS_ENV, "1")  # stands in for JupyterLab's widget frontend
    run_dir = tmp_path / "c"
    write_job_file(run_dir, {"backend": "local", "id": "local-c", "name": "c", "time": "00:10:00"})
    supervisor = start_fake_supervisor(run_dir, 0)
    write_job_file(run_dir, {"backend": "local", "id": "local-c", "name": "c", "time": "00:10:00",
                             "supervisor_pid": supervisor.pid})
    manager = jupyter_client.KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(tmp_path))
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        deadline = time.monotonic() + 20
        while Job(run_dir).state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
        msg_id = client.execute(textwrap.dedent(f"""
            from tutorial_lib import jobs
            from tutorial_lib.figures import monitor
            table = await monitor.watch_async(jobs.attach({str(run_dir)!r}), timeout=60, refresh=0.2)
            print("final", table.loc[0, "state"])
        """))
        started, clicked, printed = time.monotonic(), False, ""
        while time.monotonic() - started < 90:
            try:
                msg = client.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            content = msg["content"]
            if msg["msg_type"] == "comm_open" and content["data"].get("state", {}).get("description") == "Cancel c":
                assert not content["data"]["state"].get("disabled")
                click = {"method": "custom", "content": {"event": "click"}}
                client.shell_channel.send(client.session.msg("comm_msg", {"comm_id": content["comm_id"],
                                                                          "data": click}))
                clicked = time.monotonic()
            elif msg["msg_type"] == "stream":
                printed += content["text"]
            elif msg["msg_type"] == "error":
                pytest.fail("\n".join(content["traceback"]))
            elif (msg["msg_type"] == "status" and content["execution_state"] == "idle"
                  and msg["parent_header"].get("msg_id") == msg_id):
                break
        assert clicked, "no Cancel button was displayed"
        assert "final CANCELLED" in printed
        assert time.monotonic() - clicked < 30  # acted during the watch, not after its 60 s timeout
        assert supervisor.wait(timeout=10) == 0
        assert json.loads((run_dir / STATE_FILE).read_text())["state"] == "CANCELLED"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def test_lr_schedules_show_every_step_decay_on_a_log_axis():
    # Goyal et al.'s schedule at batch 8k: 3.2, then /10 at epochs 30, 60 and 80 (0.032 and 0.0032 are
    # invisible beside 3.2 on a linear axis)
    values = [3.2] * 30 + [0.32] * 30 + [0.032] * 20 + [0.0032] * 10
    ax = plots.plot_lr_schedules({"batch 8192": values}, steps_per_epoch=1)
    assert ax.get_yscale() == "log" and "log" in ax.get_ylabel()
    low, high = ax.get_ylim()
    assert low <= 0.0032 and high >= 3.2  # every plateau inside the axis
    zoom = plots.plot_lr_schedules({"batch 8192": values}, steps_per_epoch=1, log=False)
    assert zoom.get_yscale() == "linear"
    plt.close("all")
