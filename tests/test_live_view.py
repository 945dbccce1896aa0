"""What a person sees of a watched job, short of a browser (tests/test_browser.py has the browser):
the accuracy axis, the notes on empty panels, the rounded job table, whole names in the figure's table,
a Cancel click after an interrupted ``watch``, and the LR-explorer's sliders.

Jobs are fake ``local`` run directories (job.json, job_state.json, metrics.jsonl); no training runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from tests.conftest import start_fake_supervisor, write_live_state  # noqa: E402
from tutorial_lib.analyses import analysis  # noqa: E402
from tutorial_lib.engine.config import make_config  # noqa: E402
from tutorial_lib.figures import monitor, plots
from tutorial_lib.jobs import Job  # noqa: E402
from tutorial_lib.jobs.record import write_job_file  # noqa: E402
from tutorial_lib.jobs.supervisor import write_state  # noqa: E402
from tutorial_lib.rundir.metrics import MetricsWriter  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent


def fake_job(root: Path, name: str, state: str, epochs_done: int = 0, planned: int = 3, top1: float = 17.548747,
             rate: float = 153.234167, supervisor_pid: int | None = None) -> Job:
    run_dir = root / name
    write_job_file(run_dir, {"backend": "local", "id": f"local-{name}", "name": name, "time": "00:10:00",
                             "spec": {"nodes": 1, "gpus_per_node": 1}, "supervisor_pid": supervisor_pid or os.getpid()})
    if state in ("PENDING", "RUNNING") and supervisor_pid is None:
        write_job_file(run_dir, {"backend": "local", "id": f"local-{name}", "name": name, "time": "00:10:00",
                                 "spec": {"nodes": 1, "gpus_per_node": 1},
                                 "supervisor_pid": write_live_state(run_dir, state)})
    else:
        write_state(run_dir, state, exit_code=0 if state == "COMPLETED" else None)
    writer = MetricsWriter(run_dir)
    writer.write("start", world_size=1, global_batch=32, scaled_lr=0.1, hosts=["node1"], steps_per_epoch=2,
                 epochs=planned)
    for epoch in range(1, epochs_done + 1):
        writer.write("step", epoch=epoch, step=2 * epoch, loss=2.0, lr=0.1, images_per_sec=rate)
        writer.write("epoch", epoch=epoch, train_loss=2.0, val_loss=2.1, top1=top1, top5=top1 + 30,
                     epoch_time=1.0, images_per_sec=rate, lr=0.1)
    return Job(run_dir)


def test_one_epoch_is_a_point_on_the_planned_epoch_axis(tmp_path):
    ax = plots.plot_accuracy([fake_job(tmp_path, "one", "RUNNING", epochs_done=1, planned=3)])
    assert ax.get_xlim() == (0.5, 3.5)  # was 0.945 .. 1.055 around the single point
    assert [tick for tick in ax.get_xticks() if 0.5 <= tick <= 3.5] == [1, 2, 3]
    ax = plots.plot_accuracy({"frames without a start event": fake_job(tmp_path, "two", "RUNNING", 2).metrics("epoch")})
    assert ax.get_xlim() == (0.5, 2.5)


def test_empty_panels_say_waiting_while_running_and_what_is_missing_once_ended(tmp_path):
    running = monitor.Monitor(fake_job(tmp_path, "r", "RUNNING"), notebook=False)
    running.poll()
    assert [ax.texts[0].get_text() for ax in running.figure().axes[:3]] == ["waiting for metrics..."] * 3
    cancelled = monitor.Monitor(fake_job(tmp_path, "c", "CANCELLED"), notebook=False)
    cancelled.poll()
    notes = [ax.texts[0].get_text() for ax in cancelled.figure().axes[:3]]
    assert notes == ["no step logged", "no step logged", "no epoch finished"]


def test_watch_returns_the_table_rounded_as_shown(tmp_path, capsys):
    table = monitor.watch(fake_job(tmp_path, "done", "COMPLETED", epochs_done=1), timeout=10, refresh=0.05)
    assert table.loc[0, "top1"] == 17.5 and table.loc[0, plots.LAST_EPOCH_RATE] == 153.0
    assert plots.job_table([Job(tmp_path / "done")]).loc[0, "top1"] == 17.5


def test_long_job_names_are_not_cut_in_the_figure_table(tmp_path):
    name = "a-rather-long-job-name-for-the-scaling-study-8-nodes"
    watcher = monitor.Monitor(fake_job(tmp_path, name, "RUNNING", epochs_done=1), notebook=False)
    watcher.poll()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(watcher.figure())
    canvas.draw()
    fig, renderer = canvas.figure, canvas.get_renderer()
    table = fig.axes[3].tables[0]
    cell = table.get_celld()[(1, 0)]
    assert cell.get_text().get_text() == name
    text_width = cell.get_text().get_window_extent(renderer).width
    assert text_width < cell.get_window_extent(renderer).width  # the cell holds the whole name




def test_cancel_click_after_an_interrupted_watch_redraws(tmp_path, capsys):
    """Kernel > Interrupt stops ``watch``; a later Cancel click must leave the figure and button current."""
    pytest.importorskip("ipywidgets")
    job = fake_job(tmp_path, "long", "PENDING")
    supervisor = start_fake_supervisor(job.run_dir, 0.5)
    try:
        job = fake_job(tmp_path, "long", "PENDING", supervisor_pid=supervisor.pid)
        deadline = time.monotonic() + 20
        while job.state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher = monitor.Monitor(job, refresh=0.05, notebook=False)
        watcher.show_controls(active=False)  # as during a blocking watch()
        watcher.watching = True
        watcher.step(force=True)
        watcher.finish("interrupted")  # what watch() does on KeyboardInterrupt
        button = watcher._buttons[job.id]
        assert not button.disabled and watcher.states[job.id] == "RUNNING"
        draws = watcher.draws
        button.click()
        assert watcher.states[job.id] == "CANCELLED" and watcher.table().loc[0, "state"] == "CANCELLED"
        assert watcher.draws > draws  # redrawn after the click, not stale at RUNNING
        assert button.description == "long: CANCELLED" and button.disabled
        assert "CANCELLED" in capsys.readouterr().out  # the status line (the notebook figure in a kernel)
        assert supervisor.wait(timeout=10) == 0
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def test_lr_explorer_sliders_show_whole_labels_and_a_usable_warmup_range():
    ipywidgets = pytest.importorskip("ipywidgets")
    goyal = make_config("hal", name="04-goyal", base_lr=0.1, epochs=90, warmup_epochs=5)
    shown = analysis.lr_explorer(goyal, global_batch=8192, warmup_epochs=5, interactive=True)
    sliders = {child.description: child for child in shown.widget.children if isinstance(child, ipywidgets.Widget)
               and hasattr(child, "description") and child.description}
    batch, warmup = sliders["global batch"], sliders["warmup epochs"]
    for slider in (batch, warmup):
        assert slider.style.description_width == "initial"  # the label is not cut to "global bat..."
        assert slider.layout.width == "520px"
    assert (warmup.min, warmup.max, warmup.step, warmup.value) == (0.0, 20.0, 0.5, 5.0)  # 40 steps, not 180
    assert analysis.warmup_slider_max(make_config("smoke", epochs=4), 1.0) == 4.0  # never past the run's epochs
