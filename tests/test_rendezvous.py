"""The rendezvous port has one rule (tutorial_lib.jobs.rendezvous): notebook 05 shows it, and
cluster_scripts/train.sbatch asks the same module for its port."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tutorial_lib.jobs.rendezvous import main, port_lines, rendezvous_port

SBATCH = Path(__file__).resolve().parents[1] / "cluster_scripts" / "train.sbatch"
JOB_IDS = (0, 26, 4711, 19999, 20000, 20026, 987654, 2**31 - 1)


def test_the_batch_script_takes_its_port_from_the_library_only():
    lines = [text.strip() for text in SBATCH.read_text().splitlines() if re.match(r"\s*PORT=", text)]
    helper = 'PORT=$("${SITE_LAUNCH[@]}" "$TUTORIAL_PYTHON" -m tutorial_lib.jobs.rendezvous "$SLURM_JOB_ID") || exit 1'
    assert lines == [helper]
    assert "20000" not in SBATCH.read_text()


def test_ports_stay_in_their_range_and_the_notebook_lines_show_them(capsys):
    assert all(20000 <= rendezvous_port(job_id) < 40000 for job_id in JOB_IDS)
    assert port_lines([26, 4711]) == "job     26: rendezvous port 20026\njob   4711: rendezvous port 24711"
    assert main(["-1"]) == 2 and "JOB_ID" in capsys.readouterr().err
    with pytest.raises(ValueError, match="job_id"):
        rendezvous_port(-1)
