"""What the ninth re-run of issue 43 (/work/wt/notes/r43p-report.md) found in the run lock: a ``LOCK`` record whose
numbers Python cannot take (a pid of 1e999 or of 5,000 digits, a pid that is a list, a ``since`` of 5,000 digits, a
pid past any process) was an OverflowError, ValueError or TypeError traceback from the trainer, ``rundir fresh`` and
``jobs.submit``. A damaged lock cannot belong to a live writer, which writes those fields itself: it is stale, as a
torn one is. The test failed on the code before (checked by reverting the library change).
"""

from __future__ import annotations

import socket

import pytest

from tutorial_lib.rundir.layout import LOCK_FILE
from tutorial_lib.rundir.lock import RunLock

HOST = socket.gethostname()
DAMAGED = [f'{{"host": "{HOST}", "pid": 1e999, "pid_start": 1}}',
           f'{{"host": "{HOST}", "pid": {"5" * 5000}, "pid_start": 1}}',
           f'{{"host": "{HOST}", "pid": [1], "pid_start": 1}}',
           f'{{"host": "{HOST}", "pid": {"9" * 30}, "pid_start": 1}}',
           f'{{"host": "{HOST}", "pid": 1, "since": {"5" * 5000}}}',
           f'{{"host": "other", "pid": 1, "slurm_job_id": {"5" * 5000}}}']


@pytest.mark.parametrize("record", DAMAGED, ids=["pid-inf", "pid-5000-digits", "pid-list", "pid-30-digits",
                                                 "since-5000-digits", "slurm-id-5000-digits"])
def test_a_lock_record_with_numbers_python_cannot_take_is_stale_like_a_torn_one(tmp_path, record):
    (tmp_path / LOCK_FILE).write_text(record)
    assert RunLock(tmp_path).holder() is None
    RunLock(tmp_path).check()  # nobody holds it: no RunLockedError, no traceback
