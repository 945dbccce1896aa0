"""Issue 30: one process preparing images (decode_cost, 0 DataLoader workers) runs on one torch thread, as a
DataLoader worker does, so "one process" and "one worker" measure the same work (with torch's default of a
thread per core the two differed 3-4x on a busy 2-core machine)."""

from __future__ import annotations

import pytest
import torch

from tutorial_lib.bench import data as bench_data
from tutorial_lib.engine.input import cpu


@pytest.fixture(scope="module")
def fake_set(tmp_path_factory):
    return bench_data.make_fake_imagenet(tmp_path_factory.mktemp("threads") / "imagenet", classes=1, per_class=4,
                                         size=(64, 48))


@pytest.fixture
def threads_seen(monkeypatch):
    """The torch thread count each training transform call ran on, in this process."""
    seen = []
    original = cpu.train_transform

    def recording(*args, **kwargs):
        transform = original(*args, **kwargs)

        def call(*a, **k):
            seen.append(torch.get_num_threads())
            return transform(*a, **k)
        return call

    monkeypatch.setattr(cpu, "train_transform", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield seen
    torch.set_num_threads(before)


def test_decode_cost_augments_on_one_thread_like_a_worker(fake_set, threads_seen):
    cost = bench_data.decode_cost(fake_set, 16, images=3)
    assert threads_seen == [1, 1, 1] and cost["torch_threads"] == 1
    assert torch.get_num_threads() == 2  # the notebook's own setting is given back


def test_zero_workers_prepare_on_one_thread_like_a_worker(fake_set, threads_seen):
    record = bench_data.measure_loader(fake_set, workers=0, batch_size=2, image_size=16, batches=1, with_cost=False)
    assert threads_seen and set(threads_seen) == {1} and record["main_process_torch_threads"] == 1
    assert torch.get_num_threads() == 2
