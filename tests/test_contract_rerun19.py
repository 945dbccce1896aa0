"""What the nineteenth re-run of issue 43 (/work/wt/notes/r43z-report.md) found at 7cf3738, each failing on the code
before (checked by reverting the library change):

* A1: ``lr_milestones`` holding an increasing list whose last epoch is past Python's 4,300 digits was accepted by
  ``validate``; ``jobs.submit`` then raised str()'s ValueError while writing the job's command line, after the run
  folder was made.
"""

from __future__ import annotations

import pytest

from tutorial_lib.engine.config import ConfigError, make_config, validate


@pytest.mark.parametrize("milestones", [[10**5000], [1, 10**5000], (10**5000,), [30, 2**31]])
def test_a_milestone_no_run_reaches_is_refused_by_validate(milestones):
    """A1: refused naming lr_milestones, in one line with its fix, before anything is written."""
    with pytest.raises(ConfigError, match=r"^lr_milestones: must be epochs of at most 2,147,483,647.*Fix: ") as refused:
        validate(make_config("smoke", lr_milestones=milestones), check_paths=False)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


def test_the_largest_milestone_a_run_can_count_is_taken():
    """The bound is the trainer's count limit: 2**31 - 1 epochs is still a milestone."""
    cfg = make_config("smoke", lr_milestones=[30, 2**31 - 1])
    validate(cfg, check_paths=False)
    assert cfg.lr_milestones == [30, 2**31 - 1]


def test_a_milestone_too_large_is_refused_before_submit_makes_the_run_folder(tmp_path):
    """A1: through ``jobs.submit`` the refusal comes before the run folder exists."""
    from tutorial_lib import jobs

    cfg = make_config("smoke", output_root=str(tmp_path / "runs"), name="r", lr_milestones=[10**5000])
    with pytest.raises(ConfigError, match=r"^lr_milestones: "):
        jobs.submit(cfg, backend="local")
    assert not (tmp_path / "runs").exists()
