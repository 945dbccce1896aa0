"""Scaling-study tables and notebook-05 helpers, on fake run directories (no training, no Slurm)."""

import json
import math
import shlex
from pathlib import Path

import pandas as pd
import pytest

from tutorial_lib.analyses import batch_jobs, reference, study
from tutorial_lib.rundir.layout import CONFIG_FILE, JOB_FILE, JOB_LOG, METRICS_FILE
from tutorial_lib.scaling import IMAGENET_TRAIN_IMAGES


def fake_run(root: Path, name: str, nodes: int, gpus_per_node: int, epochs: list[dict], batch_size: int = 32,
             hosts: list[str] | None = None, with_job_file: bool = True) -> Path:
    """A run directory as a finished job leaves it: config.json, job.json, metrics.jsonl."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    world = nodes * gpus_per_node
    hosts = hosts or [f"node{1 + rank // gpus_per_node}" for rank in range(world)]
    (run_dir / CONFIG_FILE).write_text(json.dumps({
        "name": name, "batch_size": batch_size, "world_size": world, "global_batch": world * batch_size,
        "hosts": hosts}))
    if with_job_file:
        (run_dir / JOB_FILE).write_text(json.dumps({
            "backend": "local", "id": "local-1", "name": name,
            "spec": {"nodes": nodes, "ranks_per_node": gpus_per_node}}))
    events = [{"event": "start", "world_size": world, "global_batch": world * batch_size, "hosts": hosts}]
    events += [{"event": "step", "step": 5, "loss": 2.0, "images_per_sec": 1.0}]
    events += [{"event": "epoch", "epoch": i + 1, **e} for i, e in enumerate(epochs)]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events) + '{"event": "ep')
    return run_dir


def epoch(rate: float, seconds: float = 10.0, top1: float = 50.0, top5: float = 90.0) -> dict:
    return {"images_per_sec": rate, "epoch_time": seconds, "top1": top1, "top5": top5}


@pytest.fixture
def sweep(tmp_path):
    """A 1, 2 and 4 GPU study, given out of order; first epochs slow (warm-up)."""
    return [
        fake_run(tmp_path, "s-4", 2, 2, [epoch(50), epoch(360, top1=70.0, top5=95.0)]),
        fake_run(tmp_path, "s-1", 1, 1, [epoch(20), epoch(100, seconds=10), epoch(100, seconds=30)]),
        fake_run(tmp_path, "s-2", 1, 2, [epoch(30), epoch(190)]),
    ]


# ------------------------------------------------------------------ throughput and table
def test_throughput_skips_the_first_epoch_and_weights_by_time():
    assert study.measured_throughput([epoch(10), epoch(100, 10), epoch(200, 30)]) == pytest.approx(175.0)
    assert study.measured_throughput([epoch(42)]) == 42  # one epoch: nothing to skip
    assert math.isnan(study.measured_throughput([]))
    assert study.measured_throughput([{"images_per_sec": 5}, {"images_per_sec": 7}, {"images_per_sec": 9}]) == 8


def test_collect_orders_by_gpus_and_computes_efficiency_and_projection(sweep):
    frame = study.collect(sweep)
    assert list(frame["gpus"]) == [1, 2, 4]
    assert list(frame["nodes"]) == [1, 1, 2]
    assert list(frame["global_batch"]) == [32, 64, 128]
    assert list(frame["images_per_sec"]) == pytest.approx([100, 190, 360])
    assert list(frame["efficiency"]) == pytest.approx([1.0, 0.95, 0.90])
    assert frame["epoch_s"].iloc[0] == pytest.approx(IMAGENET_TRAIN_IMAGES / 100)
    assert frame["time_to_train_s"].iloc[2] == pytest.approx(90 * IMAGENET_TRAIN_IMAGES / 360)
    assert frame["top1"].iloc[2] == 70.0 and frame["top5"].iloc[2] == 95.0
    assert frame["hosts"].iloc[2] == ["node1", "node2"]
    short = study.collect(sweep, epochs=2, dataset_images=1000)
    assert short["time_to_train_s"].iloc[0] == pytest.approx(20.0)


def test_scaling_table_has_the_reference_columns_and_readable_times(sweep):
    table = study.scaling_table(sweep)
    # the rate says what it is: the monitor's table shows the last epoch's (issue 44)
    assert list(table.columns) == ["GPUs", "nodes", "global batch", "throughput (img/s, mean of epochs 2 on)",
                                   "throughput efficiency (%)",
                                   "ImageNet epoch (projected)", "90 epochs (projected)", "top-1 (%)", "top-5 (%)"]
    assert list(table.index) == ["s-1", "s-2", "s-4"]
    row = table.loc["s-1"]
    assert row["throughput efficiency (%)"] == "100.0"
    assert row["ImageNet epoch (projected)"] == "3h33m32s"  # 1,281,167 / 100 s = 12,811.67 s
    assert row["90 epochs (projected)"] == "320h17m30s"
    assert study.scaling_table(sweep, epochs=10).columns[6] == "10 epochs (projected)"


def test_records_can_be_passed_instead_of_runs(sweep):
    records = [study.run_record(run) for run in sweep]
    pd.testing.assert_frame_equal(study.collect(records), study.collect(sweep))


def test_nodes_fall_back_to_distinct_hosts_without_job_file(tmp_path):
    run = fake_run(tmp_path, "bare", 2, 1, [epoch(10)], with_job_file=False)
    record = study.run_record(str(run))
    assert (record["gpus"], record["nodes"], record["gpus_per_node"]) == (2, 2, 1)


def test_run_without_epochs_is_named_in_the_error(tmp_path):
    run = fake_run(tmp_path, "broken-run", 1, 1, [])
    with pytest.raises(ValueError, match="broken-run.*no epoch"):
        study.collect([run])
    with pytest.raises(ValueError, match="no runs"):
        study.collect([])


def test_projection_of_nothing_is_nan():
    assert math.isnan(study.projected_time_s(0))
    assert math.isnan(study.projected_time_s(float("nan")))
    assert study.projected_time_s(IMAGENET_TRAIN_IMAGES, epochs=90) == pytest.approx(90.0)


def test_accuracy_runs_are_labelled_by_global_batch(sweep):
    curves = study.accuracy_runs(sweep)
    assert list(curves) == ["4 GPUs on 2 nodes, batch 128", "1 GPU on 1 node, batch 32", "2 GPUs on 1 node, batch 64"]
    assert list(curves["1 GPU on 1 node, batch 32"]["epoch"]) == [1, 2, 3]


def test_reference_000_rows_match_its_published_numbers():
    frame = reference.reference_frame("hal")
    assert list(frame["gpus"]) == [2, 4, 8, 16, 32, 64]
    assert list(frame["nodes"]) == [1, 1, 2, 4, 8, 16]
    assert list(frame["global_batch"]) == [416, 832, 1664, 3328, 6656, 13312]
    assert frame["time_to_train_s"].iloc[0] == pytest.approx(20 * 3600 + 36 * 60 + 51.11)
    assert frame["time_to_train_s"].iloc[-1] == pytest.approx(3600 + 7 * 60 + 51.31)
    assert frame["efficiency"].iloc[0] == 1.0
    assert frame["efficiency"].iloc[-1] == pytest.approx(33100 / 32 / 1582)
    table = reference.reference_table("hal")
    assert table.loc["hal: 64 GPUs", "90 epochs (published)"] == "1h07m51s"
    assert set(table["top-1 (%)"]) == {76.0} and set(table["top-5 (%)"]) == {93.0}
    # two different figures, each named for what it measures: per-GPU logged throughput, and published wall time
    assert table.loc["hal: 64 GPUs", "throughput efficiency (%)"] == round(100 * 33100 / 32 / 1582, 1)
    published_2, published_64 = 20 * 3600 + 36 * 60 + 51.11, 3600 + 7 * 60 + 51.31
    assert table.loc["hal: 64 GPUs", "time-to-solution efficiency (%)"] == round(
        100 * 2 * published_2 / (64 * published_64), 1)
    efficiency = table.loc["hal: 64 GPUs", "time-to-solution efficiency (%)"]
    assert f"{efficiency:.1f}%" in reference.model_comparison_text("hal")


def test_projection_from_one_run_starts_at_its_measured_rate_and_says_projected(sweep):
    one_gpu = sweep[1]  # s-1: one GPU
    (one_gpu / "config.json").write_text(json.dumps({**json.loads((one_gpu / "config.json").read_text()),
                                                     "parameters": 25_557_032, "bucket_cap_mb": 25}))
    table = reference.projection_from_run(one_gpu, [1, 4, 64])
    assert list(table.index) == [1, 4, 64]
    assert table.loc[1, "projected throughput (img/s)"] == round(study.run_record(one_gpu)["images_per_sec"])
    assert table.loc[1, "projected efficiency (%)"] == 100.0
    assert table.loc[64, "projected efficiency (%)"] <= 100.0
    assert all("projected" in column for column in table.columns[2:-1])


def test_model_comparison_text_is_the_table_without_assumptions():
    short, full = reference.model_comparison_text("hal"), reference.model_comparison_text("hal", details=True)
    assert "limited by" in short and "Assumptions" not in short
    assert full.startswith(short) and "Assumptions" in full


@pytest.mark.parametrize("value, expected", [([1, 2], [1, 2]), ("[1, 2, 4]", [1, 2, 4]), ("1,2", [1, 2]), (4, [4])])
def test_int_list_accepts_papermill_text(value, expected):
    assert study.int_list(value) == expected


@pytest.mark.parametrize("value", ["", "one,two", [0, 1], [1.5]])
def test_int_list_refuses_nonsense(value):
    with pytest.raises(ValueError):
        study.int_list(value)


def test_efficiency_plot_puts_both_studies_on_one_axis(sweep):
    import matplotlib

    matplotlib.use("Agg")
    ax = reference.plot_efficiency_vs_reference(study.collect(sweep), reference.reference_frame("hal"),
                                            label="mine", reference_label="ref")
    labels = [line.get_label() for line in ax.lines]
    assert "mine" in labels and "ref" in labels
    assert list(ax.get_xticks()) == [1, 2, 4, 8, 16, 32, 64]


# ------------------------------------------------------------------ batch script sections
def test_real_sbatch_script_sections():
    sections = batch_jobs.sbatch_sections()
    assert list(sections)[:3] == ["header", "directives", "setup"]
    assert [k for k in sections if k.isdigit()] == [str(n) for n in range(0, 8)]
    assert "# >>> site >>>" in sections["0"].text  # where each job's copy gets its site's lines
    assert "#SBATCH --signal=B:USR1@120" in sections["directives"].text
    assert "#SBATCH --requeue" in sections["directives"].text
    assert "scontrol show hostnames" in sections["2"].text and "tutorial_lib.jobs.rendezvous" in sections["2"].text
    assert "NCCL_SOCKET_IFNAME" in sections["3"].text
    assert "trap on_usr1 USR1" in sections["4"].text
    launch = sections["5"].text
    assert "srun --ntasks-per-node=1" in launch and "-m tutorial_lib.jobs.launch" in launch
    assert "--rdzv-backend c10d" in launch and "is_host=" in launch and "--max-restarts" in launch
    assert "scontrol requeue" in sections["7"].text
    # nothing lost or duplicated: the sections together are the whole script
    script = batch_jobs.SBATCH_SCRIPT.read_text()
    assert sum(len(s.text) for s in sections.values()) <= len(script)
    for line in script.splitlines():
        if line.strip():
            assert sum(line in s.text.splitlines() for s in sections.values()) >= 1, line


def test_sections_of_a_small_script(tmp_path):
    script = tmp_path / "x.sbatch"
    script.write_text("#!/bin/bash\n# ===\n# usage\n# ===\n\n# why\n#SBATCH --nodes=1\n#SBATCH --time=5\n\n"
                      "set -e\n\n# ------------\n# 1. First part\n# ------------\necho one\n\n"
                      "# ------------\n# 2. Second\n# ------------\necho two\n")
    sections = batch_jobs.sbatch_sections(script)
    assert list(sections) == ["header", "directives", "setup", "1", "2"]
    assert sections["directives"].text == "# why\n#SBATCH --nodes=1\n#SBATCH --time=5"
    assert sections["setup"].text == "set -e"
    assert sections["1"].title == "1. First part" and sections["1"].text.endswith("echo one")
    assert sections["2"].text.endswith("echo two")


def test_show_sbatch_joins_sections_and_displays_as_bash():
    shown = batch_jobs.show_sbatch("1", "2")
    assert "RANKS_PER_NODE" in shown.text and "HEAD=" in shown.text
    assert shown._repr_markdown_().count("```") == 2 and "```bash" in shown._repr_markdown_()
    assert repr(shown).startswith("1. Inputs")
    with pytest.raises(KeyError, match="it has: header, directives"):
        batch_jobs.show_sbatch("99")
    with pytest.raises(KeyError):
        batch_jobs.show_sbatch()


def test_command_text_round_trips_and_keeps_pairs_together():
    argv = ["sbatch", "--parsable", "--nodes=2", "/x/train.sbatch", "--name", "a b;rm -rf /", "--epochs", "2",
            "--lr-milestones", "30,60,80"] + [f"--flag{i}" for i in range(30)]
    text = batch_jobs.command_text(argv, width=60)
    assert shlex.split(text.replace("\\\n", " ")) == argv
    assert "--name 'a b;rm -rf /'" in text and "--epochs 2" in text
    assert all(len(line) <= 60 for line in text.splitlines())
    assert batch_jobs.command_text(["echo", "hi"]) == "echo hi"


# ------------------------------------------------------------------ live-job helpers (fake jobs)
class FakeJob:
    def __init__(self, run_dir, events, done=False, backend="local"):
        self.run_dir, self._events, self._done = Path(run_dir), events, done
        self.name, self.id, self.backend = "fake", "local-7", backend
        self.record = {"spec": {"nodes": 2, "gpus_per_node": 1}}
        self.log_path = self.run_dir / JOB_LOG
        self.state = "COMPLETED" if done else "RUNNING"

    def done(self):
        return self._done

    def events(self):
        return list(self._events)

    def explain(self):
        return "explained"

    def status(self):
        return {"state": self.state, "exit_code": 0 if self._done else None}


def test_wait_for_event_returns_the_first_matching_record(tmp_path):
    job = FakeJob(tmp_path, [{"event": "start"}, {"event": "step", "step": 5}, {"event": "step", "step": 10}])
    assert batch_jobs.wait_for_event(job, "step", timeout=1)["step"] == 5


def test_wait_for_event_explains_a_job_that_ended_first(tmp_path):
    with pytest.raises(RuntimeError, match="(?s)ended before logging a 'step' event.*explained"):
        batch_jobs.wait_for_event(FakeJob(tmp_path, [{"event": "start"}], done=True), "step", timeout=1)
    with pytest.raises(TimeoutError, match="no 'epoch' event within"):
        batch_jobs.wait_for_event(FakeJob(tmp_path, []), "epoch", timeout=0.2, poll=0.05)


def test_hosts_table_lists_the_node_of_every_rank(sweep):
    table = study.hosts_table(sweep[0])
    assert list(table.index) == [0, 1, 2, 3] and list(table["node"]) == ["node1", "node1", "node2", "node2"]


def test_hosts_table_before_start_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="wait until the job has started"):
        study.hosts_table(tmp_path)


def test_queue_report_of_a_local_job(tmp_path):
    report = batch_jobs.queue_report(FakeJob(tmp_path, [], done=True))
    assert report["JobState"] == "COMPLETED" and report["NumNodes"] == 2 and report["ExitCode"] == 0


def test_queue_report_of_an_ended_slurm_job_says_it_ended(tmp_path):
    """The issue-44 read of 05: the report after the job had ended said "the scheduler has not answered yet"; the
    state came from the run directory's exit record, and the scheduler's fields were not kept."""
    job = FakeJob(tmp_path, [], done=True, backend="slurm")
    job.id, job.queue_fields = "26", dict
    job.status = lambda: {"state": "COMPLETED", "source": "exit record", "exit_code": 0, "reason": ""}
    report = batch_jobs.queue_report(job)
    assert report["JobState"] == "COMPLETED" and report["StateFrom"] == "exit record" and report["ExitCode"] == 0
    assert "not answered" not in report["note"] and "the job has ended" in report["note"]
    assert "sacct -j 26" in report["note"]
    job.status = lambda: {"state": "UNKNOWN", "source": "no answer yet", "exit_code": None, "reason": ""}
    assert batch_jobs.queue_report(job)["note"] == "the scheduler has not answered yet"
    job.status = lambda: {"state": "PENDING", "source": "submitted", "exit_code": None, "reason": ""}
    assert "has not reported its fields yet" in batch_jobs.queue_report(job)["note"]


def test_readable_log_drops_progress_bars_and_folds_stack_frames():
    raw = ("job 26 (restart 0): 2 node(s)\n"
           "epoch 1/2:   0%|          | 0/10 [00:00<?, ?it/s]\r"
           "epoch 1/2:  50%|#####     | 5/10 [00:02<00:02,  2.45it/s, loss=2.3]\n"
           "epoch 1/2: 100%|██████████| 10/10 [00:04<00:00]\n      \n"
           "epoch 1/2: train loss 2.424  top-1 11.1%\n"
           "[W] recvVector failed\nframe #0: c10::Error\nframe #1: x\n<omitting python frames>\nframe #9: _start\n"
           "done\n")
    assert batch_jobs.readable_log(raw).splitlines() == [
        "job 26 (restart 0): 2 node(s)", "epoch 1/2: train loss 2.424  top-1 11.1%", "[W] recvVector failed",
        "    [... 4 stack frame lines ...]", "done"]
    assert batch_jobs.readable_log(raw, tail=2).splitlines() == ["    [... 4 stack frame lines ...]", "done"]
    assert batch_jobs.readable_log("") == ""


def test_readable_log_drops_the_halves_of_a_cut_progress_bar():
    """05's log tail ended in a redraw's fragment: a bar's start with no count, and a count with no bar."""
    raw = ("epoch 1/3: train loss 2.1\n"
           "epoch 2/3:  45%|####5     \n"
           "| 10/22 [00:02<00:03,  3.6it/s, img_s=240]\n"
           " 11/22 [00:03<00:02\n"
           "done\n")
    assert batch_jobs.readable_log(raw).splitlines() == ["epoch 1/3: train loss 2.1", "done"]


def test_readable_log_keeps_a_line_printed_into_a_progress_bar_redraw():
    """The fresh-clone 05 log: rank 0's 'epoch 2/3: ...' line landed inside a half-written tqdm redraw (stdout
    and stderr share the Slurm output file), and dropping the redraw dropped the epoch line with it."""
    raw = ("epoch 2/3:  91%|█████████ | 20/22 [00:05<00:00,  3.59it/s, img_s=233, epoch 2/3: train loss 1.494  "
           "val loss 3.334  top-1 63.2%\n"
           "epoch 3/3: 100%|██████████| 22/22 [00:06<00:00,  3.59it/s, loss=1.062]epoch 3/3: train loss 0.601\n"
           "epoch 3/3:  50%|#####     | 11/22 [00:02<00:02,  3.61it/s, img_s=252, loss=2.173]\n")
    assert batch_jobs.readable_log(raw).splitlines() == [
        "epoch 2/3: train loss 1.494  val loss 3.334  top-1 63.2%", "epoch 3/3: train loss 0.601"]
