"""Every TrainConfig field that changes what is trained, or how, reaches the objects the trainer builds.

Each test builds the trainer's own objects (``Trainer.setup()`` on tiny synthetic data, or ``TrainStep``)
with non-default values and checks the real thing: the optimiser's param groups, the LR schedule's
values, the loss, the GradScaler, the DDP wrapper, the transforms, the model. ``FIELD_TESTS`` maps each
such field to the tests that fail when it is ignored or mis-wired; ``NOT_TRAINED`` names the fields that
change nothing trained, with the reason. ``test_every_field_is_covered_or_exempt`` walks the fields:
a new field fails it until it has a line in one of the two tables.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from tutorial_lib.engine.config import TrainConfig, make_config, validate
from tutorial_lib.engine.errors import ConfigError
from tutorial_lib.engine.input.cpu import RandomCropFlip
from tutorial_lib.engine.recipe import recipe_changes
from tutorial_lib.engine.step import TrainStep
from tutorial_lib.engine.trainer import Trainer

# field -> the tests (tests/<module>.py::<function>) that fail when the field is ignored or mis-wired.
# A new field that changes training gets one line here (and its test); see also NOT_TRAINED.
FIELD_TESTS: dict[str, tuple[str, ...]] = {
    "dataset": ("test_recipe_fields.py::test_dataset_synthetic_images_and_data_dir_reach_the_loaders",),
    "data_dir": ("test_recipe_fields.py::test_dataset_synthetic_images_and_data_dir_reach_the_loaders",
                 "test_sampler_order.py::test_each_epoch_is_a_new_permutation_split_over_the_ranks"),
    "image_size": ("test_recipe_fields.py::test_augmentation_fields_reach_the_training_transform",),
    "train_augment": ("test_recipe_fields.py::test_augmentation_fields_reach_the_training_transform",),
    "min_crop_scale": ("test_recipe_fields.py::test_augmentation_fields_reach_the_training_transform",),
    "hflip": ("test_recipe_fields.py::test_augmentation_fields_reach_the_training_transform",),
    "workers": ("test_recipe_fields.py::test_workers_and_input_pipeline_reach_the_loaders",),
    "input_pipeline": ("test_recipe_fields.py::test_workers_and_input_pipeline_reach_the_loaders",),
    "data_format": ("test_shards.py::test_the_loaders_read_every_training_image_once_per_epoch_over_two_ranks",
                    "test_shards.py::test_a_two_rank_run_from_shards_sees_every_image_once_per_epoch"),
    "prefetch": ("test_recipe_fields.py::test_prefetch_reaches_both_pipelines",),
    "bad_data": ("test_bad_data.py::test_bad_images_are_skipped_counted_and_named",
                 "test_bad_data.py::test_bad_data_error_stops_naming_the_file"),
    "synthetic_images": ("test_recipe_fields.py::test_dataset_synthetic_images_and_data_dir_reach_the_loaders",),
    "num_classes": ("test_recipe_fields.py::test_model_fields_reach_the_model",),
    "arch": ("test_recipe_fields.py::test_model_fields_reach_the_model",),
    "norm": ("test_recipe_fields.py::test_model_fields_reach_the_model",),
    "zero_init_residual": ("test_recipe_fields.py::test_model_fields_reach_the_model",),
    "channels_last": ("test_recipe_fields.py::test_channels_last_reaches_the_weights_and_the_batches",),
    "compile": ("test_recipe_fields.py::test_compile_mode_reaches_torch_compile",),
    "epochs": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "batch_size": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",
                   "test_sampler_order.py::test_each_epoch_is_a_new_permutation_split_over_the_ranks"),
    "base_lr": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "lr_reference_batch": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "warmup_epochs": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "warmup_start_factor": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "lr_schedule": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "lr_milestones": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "lr_decay": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "max_steps_per_epoch": ("test_recipe_fields.py::test_the_trainers_lr_schedule_follows_the_schedule_fields",),
    "optimizer": ("test_recipe_fields.py::test_sgd_fields_reach_the_trainers_optimizer",
                  "test_recipe_fields.py::test_lars_fields_reach_the_trainers_optimizer"),
    "momentum": ("test_recipe_fields.py::test_sgd_fields_reach_the_trainers_optimizer",
                 "test_recipe_fields.py::test_lars_fields_reach_the_trainers_optimizer"),
    "nesterov": ("test_recipe_fields.py::test_sgd_fields_reach_the_trainers_optimizer",),
    "weight_decay": ("test_recipe_fields.py::test_sgd_fields_reach_the_trainers_optimizer",
                     "test_recipe_fields.py::test_lars_fields_reach_the_trainers_optimizer"),
    "no_weight_decay_1d": ("test_recipe_fields.py::test_sgd_fields_reach_the_trainers_optimizer",),
    "lars_trust_coefficient": ("test_recipe_fields.py::test_lars_fields_reach_the_trainers_optimizer",),
    "label_smoothing": ("test_recipe_fields.py::test_label_smoothing_reaches_the_loss_the_step_returns",),
    "precision": ("test_recipe_fields.py::test_precision_reaches_autocast_the_scaler_and_the_tf32_flags",
                  "test_loss_scaling.py::test_fp16_overflow_step_is_skipped_and_the_scale_grows_back",
                  "test_loss_scaling.py::test_fp16_steps_apply_the_unscaled_gradient"),
    "device": ("test_recipe_fields.py::test_device_is_the_trainers_device",),
    "bucket_cap_mb": ("test_recipe_fields.py::test_bucket_cap_mb_reaches_the_ddp_wrapper",
                      "test_sampler_order.py::test_two_rank_trainer_wraps_ddp_with_the_bucket_cap"),
    "seed": ("test_recipe_fields.py::test_seed_sets_the_initial_weights",
             "test_augment_draws.py::test_an_images_crop_is_the_box_drawn_for_its_seed_epoch_and_index",
             "test_sampler_order.py::test_the_order_depends_on_the_epoch_and_the_seed_only"),
    "allreduce": ("test_comm_hooks.py::test_two_nodes_of_two_ranks_train_like_flat",),
    "stage_to": ("test_jobs.py::test_two_node_job_runs_on_two_nodes",
                 "test_staging.py::test_launcher_removes_the_copy_when_cancelled"),
    "index_dir": ("test_file_index.py::test_the_index_goes_where_the_user_placed_it",),
}

# Fields that change nothing trained: where the outputs go, what is shown, when the run pauses.
NOT_TRAINED: dict[str, str] = {
    "name": "names the run directory (output only)",
    "output_root": "where run directories go (output only)",
    "profile": "picks the defaults make_config starts from; the trainer reads only the resolved fields "
               "(test_config.py::test_profile_values_are_applied_over_defaults)",
    "log_every": "how often the loss is averaged over ranks and logged; the trained weights do not change",
    "stop_after_epochs": "pauses at a checkpoint; the resumed run trains exactly as an unbroken one "
                         "(test_resume.py::test_resume_at_epoch_boundary_is_exact)",
    "checkpoint": "whether checkpoint.pt is written (tests/test_files.py)",
    "progress": "tqdm bar on rank 0 (display only)",
}

# Tiny runs on synthetic data: 8 px images, 10 classes, 4 images a step.
TINY = dict(dataset="synthetic", image_size=8, batch_size=4, synthetic_images=32, num_classes=10, epochs=4,
            arch="resnet18", device="cpu", precision="fp32", workers=0, progress=False)
CPU = torch.device("cpu")


def test_every_field_is_covered_or_exempt():
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    missing = sorted(names - set(FIELD_TESTS) - set(NOT_TRAINED))
    assert not missing, (f"TrainConfig fields without a test that fails when they are ignored: {missing}. "
                         "Add the test and one line to FIELD_TESTS (or to NOT_TRAINED, with the reason).")
    assert not set(FIELD_TESTS) & set(NOT_TRAINED)
    assert not (set(FIELD_TESTS) | set(NOT_TRAINED)) - names, "entries for fields that no longer exist"
    for field, tests in FIELD_TESTS.items():
        assert tests, field
        for test in tests:
            module, _, function = test.partition("::")
            assert callable(getattr(importlib.import_module("tests." + module.removesuffix(".py")), function,
                                    None)), f"{field}: {test} does not exist"


@pytest.fixture
def build(tmp_path):
    """``build(**fields)``: a Trainer of TINY + ``fields`` after ``setup()`` (closed after the test)."""
    made = []
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32

    def _build(**fields) -> Trainer:
        cfg = make_config("smoke", **{**TINY, "output_root": str(tmp_path), "name": f"run{len(made)}", **fields})
        trainer = Trainer(cfg)
        made.append(trainer)
        trainer.setup()
        return trainer

    yield _build
    for trainer in made:
        trainer.close()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved_tf32


def _first_batch(trainer: Trainer):
    return next(iter(trainer.loaders.train_epoch(0)))


# ------------------------------------------------------------------------------ data and augmentation
def test_dataset_synthetic_images_and_data_dir_reach_the_loaders(build, jpeg_tree):
    synthetic = build(synthetic_images=48)
    assert synthetic.loaders.train_sampler is None and synthetic.loaders.train_images == 48
    assert synthetic.steps_per_epoch == len(synthetic.loaders.train) == 48 // 4
    folder = build(dataset="imagefolder", data_dir=str(jpeg_tree), num_classes=0)
    assert folder.loaders.train_images == 32 and folder.loaders.val_images == 6  # the tree's own counts
    assert folder.loaders.num_classes == 3 and folder.steps_per_epoch == 32 // 4


@pytest.mark.parametrize("pipeline", ["cpu", "gpu"])
def test_augmentation_fields_reach_the_training_transform(build, jpeg_tree, pipeline):
    def training_transform(**fields) -> dict:
        trainer = build(dataset="imagefolder", data_dir=str(jpeg_tree), input_pipeline=pipeline, **fields)
        assert _first_batch(trainer).images.shape[1:] == (3, fields["image_size"], fields["image_size"])
        if pipeline == "gpu":  # the batched device transform
            t = trainer.loaders.train_epoch(0).transform
            return {"crop": t.train, "size": t.image_size, "scale": t.min_crop_scale if t.train else None,
                    "flip": t.train and t.hflip}
        t = trainer.loaders.train.dataset.transform
        if isinstance(t, RandomCropFlip):  # crops and flips drawn from (seed, epoch, index)
            return {"crop": True, "size": t.size[0], "scale": t.min_scale, "flip": t.hflip}
        steps = {type(s).__name__: s for s in t.steps.transforms}
        return {"crop": False, "size": steps["CenterCrop"].size[0], "scale": None, "flip": False}

    assert training_transform(image_size=12, min_crop_scale=0.3, hflip=True) == dict(
        crop=True, size=12, scale=0.3, flip=True)
    assert training_transform(image_size=10, min_crop_scale=0.6, hflip=False) == dict(
        crop=True, size=10, scale=0.6, flip=False)
    assert training_transform(image_size=12, train_augment=False) == dict(crop=False, size=12, scale=None,
                                                                          flip=False)


def test_workers_and_input_pipeline_reach_the_loaders(build, jpeg_tree):
    cpu = build(dataset="imagefolder", data_dir=str(jpeg_tree), image_size=12, workers=2)
    assert cpu.loaders.train.num_workers == 2 and cpu.loaders.val.loader.num_workers == 2
    image, _ = cpu.loaders.train.dataset[0]  # the CPU pipeline: workers decode and crop (uint8, normalised later)
    assert image.shape == (3, 12, 12) and image.dtype == torch.uint8
    gpu = build(dataset="imagefolder", data_dir=str(jpeg_tree), image_size=12, input_pipeline="gpu")
    assert gpu.loaders.train.num_workers == 0
    index, payload, _, _ = gpu.loaders.train.dataset[0]  # the GPU pipeline: workers only read file bytes
    assert index == 0 and isinstance(payload, bytes) and payload[:3] == b"\xff\xd8\xff"


def test_prefetch_reaches_both_pipelines(build, jpeg_tree):
    """Depth was a constant (4 per CPU worker) and the GPU pipeline's an argument the trainer never passed."""
    for pipeline in ("cpu", "gpu"):
        trainer = build(dataset="imagefolder", data_dir=str(jpeg_tree), input_pipeline=pipeline, workers=1, prefetch=3)
        loaders = trainer.loaders
        assert loaders.train.prefetch_factor == 3 and loaders.val.loader.prefetch_factor == 3, pipeline
        if pipeline == "gpu":  # batches decoded ahead on the device's side stream
            assert loaders.train_epoch(0).prefetch == 3 and loaders.val.prefetch == 3
    with pytest.raises(ConfigError, match="^prefetch: must be a positive integer, got 0"):
        validate(make_config("smoke", dataset="synthetic", prefetch=0))
    assert recipe_changes({"prefetch": 2}, {"prefetch": 4}, {}) == ({"prefetch": [2, 4]}, {})  # resumable: same math


# ------------------------------------------------------------------------------------------ model
def test_model_fields_reach_the_model(build):
    def norms(model: nn.Module) -> set[str]:
        return {type(m).__name__ for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))}

    default = build(num_classes=7, norm="batch", zero_init_residual=True)
    assert default.model.fc.out_features == 7 and type(default.model).__name__ == "ResNet"
    assert norms(default.model) == {"BatchNorm2d"}
    last_gammas = [block.bn2.weight for layer in (default.model.layer1, default.model.layer4) for block in layer]
    assert all(torch.all(g == 0) for g in last_gammas)  # each residual block starts as the identity
    other = build(num_classes=5, norm="group", zero_init_residual=False)
    assert other.model.fc.out_features == 5 and norms(other.model) == {"GroupNorm"}
    assert all(torch.all(block.bn2.weight == 1) for block in other.model.layer1)
    small = build(arch="mobilenet_v3_small")
    assert type(small.model).__name__ == "MobileNetV3"


def test_channels_last_reaches_the_weights_and_the_batches(build, jpeg_tree):
    for channels_last in (True, False):  # the CPU pipeline's loader gives NCHW batches: the step converts them
        trainer = build(dataset="imagefolder", data_dir=str(jpeg_tree), channels_last=channels_last)
        assert trainer.model.conv1.weight.is_contiguous(memory_format=torch.channels_last) is channels_last
        formats = []
        hook = trainer.model.register_forward_pre_hook(
            lambda _m, args, formats=formats: formats.append(args[0].is_contiguous(memory_format=torch.channels_last)))
        trainer.train_step(_first_batch(trainer))
        hook.remove()
        assert formats == [channels_last]


def test_compile_mode_reaches_torch_compile(build, monkeypatch):
    modes = []

    def spy(module, mode=None, **_):
        modes.append(mode)
        return module  # nothing is compiled: only the wiring is checked

    monkeypatch.setattr(torch, "compile", spy)
    build(compile="none")
    assert modes == []
    trainer = build(compile="max-autotune-no-cudagraphs")
    assert modes == ["max-autotune-no-cudagraphs"] * 2  # the training and the evaluation model
    assert trainer.step.eval_model is trainer.model


def test_seed_sets_the_initial_weights(build):
    first, again, other = (build(seed=s).model.state_dict() for s in (5, 5, 6))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["conv1.weight"], other["conv1.weight"])


# ---------------------------------------------------------------------------- optimiser and schedule
def _groups_by_param(optimizer) -> dict[int, dict]:
    return {id(p): group for group in optimizer.param_groups for p in group["params"]}


def test_sgd_fields_reach_the_trainers_optimizer(build):
    trainer = build(optimizer="sgd", momentum=0.7, nesterov=True, weight_decay=3e-4, no_weight_decay_1d=True)
    assert type(trainer.optimizer) is torch.optim.SGD
    groups = _groups_by_param(trainer.optimizer)
    params = list(trainer.model.parameters())
    assert len(groups) == len(params) == sum(len(g["params"]) for g in trainer.optimizer.param_groups)
    for p in params:  # no decay on the 1-d tensors (norm weights, biases), decay on the rest
        assert groups[id(p)]["weight_decay"] == (0.0 if p.ndim == 1 else 3e-4)
    assert all(g["momentum"] == 0.7 and g["nesterov"] is True for g in trainer.optimizer.param_groups)

    plain = build(optimizer="sgd", momentum=0.5, nesterov=False, weight_decay=2e-4, no_weight_decay_1d=False)
    assert [(g["weight_decay"], g["momentum"], g["nesterov"]) for g in plain.optimizer.param_groups] == [
        (2e-4, 0.5, False)]


def test_lars_fields_reach_the_trainers_optimizer(build):
    trainer = build(optimizer="lars", momentum=0.8, weight_decay=2e-4, lars_trust_coefficient=0.004)
    assert type(trainer.optimizer).__name__ == "LARS"
    groups = _groups_by_param(trainer.optimizer)
    for p in trainer.model.parameters():
        group = groups[id(p)]
        assert (group["momentum"], group["trust_coefficient"]) == (0.8, 0.004)
        assert (group["weight_decay"], group["lars_exclude"]) == ((0.0, True) if p.ndim == 1 else (2e-4, False))


def _expected_lr(i: int, peak: float, warmup: int, total: int, steps: int, cfg: dict) -> float:
    """The recipe's LR at iteration ``i``, written out: linear warmup, then step or cosine decay."""
    if i < warmup:
        factor = cfg["warmup_start_factor"]
        return peak * (factor + (1 - factor) * i / warmup)
    if cfg["lr_schedule"] == "cosine":
        return peak * (1 + math.cos(math.pi * (i - warmup) / (total - warmup))) / 2
    return peak * cfg["lr_decay"] ** sum(i >= m * steps for m in cfg["lr_milestones"])


@pytest.mark.parametrize("schedule", ["step", "cosine"])
def test_the_trainers_lr_schedule_follows_the_schedule_fields(build, schedule):
    fields = dict(base_lr=0.3, lr_reference_batch=64, batch_size=4, epochs=5, warmup_epochs=1.5,
                  warmup_start_factor=0.25, lr_schedule=schedule, lr_milestones=[3, 4], lr_decay=0.2,
                  synthetic_images=64, max_steps_per_epoch=4)
    trainer = build(**fields)
    steps = trainer.steps_per_epoch
    assert steps == 4  # max_steps_per_epoch, not the 16 batches of an epoch
    values = []
    for _ in range(fields["epochs"] * steps):  # the trainer's own optimiser and scheduler, stepped as it does
        values.append(trainer.optimizer.param_groups[0]["lr"])
        trainer.optimizer.step()  # no gradients: the weights stay, only the order of calls matters
        trainer.step.scheduler.step()
    peak = 0.3 * 4 / 64  # linear scaling: base_lr per lr_reference_batch images, global batch 4
    warmup, total = round(1.5 * steps), fields["epochs"] * steps
    expected = [_expected_lr(i, peak, warmup, total, steps, fields) for i in range(total)]
    assert values == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert all(g["lr"] == trainer.optimizer.param_groups[0]["lr"] for g in trainer.optimizer.param_groups)


# ------------------------------------------------------------------------------- loss and precision
def test_label_smoothing_reaches_the_loss_the_step_returns(build):
    trainer = build(label_smoothing=0.15)
    batch = _first_batch(trainer)
    with torch.no_grad():  # BatchNorm in training mode: the same logits the step computes next
        logits = trainer.step.train_model(batch.images)
    loss = trainer.train_step(batch)
    smoothed = nn.functional.cross_entropy(logits, batch.targets, label_smoothing=0.15)
    plain = nn.functional.cross_entropy(logits, batch.targets)
    assert loss.item() == pytest.approx(smoothed.item(), rel=1e-5)
    assert abs(smoothed.item() - plain.item()) > 1e-3  # the two really differ on this batch
    assert trainer.step.criterion.label_smoothing == 0.15


@pytest.mark.parametrize("precision, dtype, scaler, tf32", [
    ("fp32", torch.float32, False, False), ("tf32", torch.float32, False, True),
    ("bf16", torch.bfloat16, False, False), ("fp16", torch.float16, True, False)])
def test_precision_reaches_autocast_the_scaler_and_the_tf32_flags(build, precision, dtype, scaler, tf32, monkeypatch):
    # A small perceptron instead of the ResNet: fp16 convolutions take seconds on a CPU; autocast is the check.
    monkeypatch.setattr("tutorial_lib.engine.step.build_model", lambda *args, **kwargs: nn.Sequential(
        nn.Flatten(), nn.Linear(3 * 8 * 8, 10)))
    trainer = build(precision=precision)  # fp16/tf32 on the CPU: validate() refuses them, the objects do not
    dtypes = []
    hook = trainer.model.register_forward_hook(lambda _m, _a, out: dtypes.append(out.dtype))
    trainer.train_step(_first_batch(trainer))
    hook.remove()
    assert dtypes == [dtype]
    assert trainer.step.scaler.is_enabled() is scaler
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32


def test_device_is_the_trainers_device(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # pretend a GPU: no CUDA call is made
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    for device, expected in (("cpu", CPU), ("auto", torch.device("cuda", 0)), ("cuda", torch.device("cuda", 0))):
        trainer = Trainer(make_config("smoke", **{**TINY, "device": device, "output_root": str(tmp_path)}))
        assert trainer.device == expected, device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Trainer(make_config("smoke", **{**TINY, "device": "auto", "output_root": str(tmp_path)})).device == CPU


# -------------------------------------------------------------------------------------------- DDP
def test_bucket_cap_mb_reaches_the_ddp_wrapper(world_of_one):
    for cap in (1, 7):
        cfg = make_config("smoke", **{**TINY, "bucket_cap_mb": cap})
        step = TrainStep(cfg, 10, CPU, steps_per_epoch=8, world_size=1, distributed=True)
        assert isinstance(step.train_model, DistributedDataParallel)
        assert step.train_model.bucket_bytes_cap == cap * 1024 * 1024
