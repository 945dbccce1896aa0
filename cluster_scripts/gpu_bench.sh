#!/usr/bin/env bash
# The full single-node GPU measurement set (written for one H100/H200; any CUDA GPU works).
#
#   bash cluster_scripts/gpu_bench.sh                 # every stage below, in order
#   bash cluster_scripts/gpu_bench.sh precision data  # only some stages (each under 10 minutes, except autotune)
#   bash cluster_scripts/gpu_bench.sh help            # this text
#   sbatch --gpus-per-node=1 --cpus-per-task=16 --time=02:00:00 cluster_scripts/gpu_bench.sh  # from the repo root
#
# Everything issue 12 asks for, in one call:
#   bash cluster_scripts/gpu_bench.sh env precision compile cudagraphs data e2e trainer peer table
#
# Stages:
#   env        nvidia-smi, torch/CUDA versions and the dense bf16/fp32 matmul rates (the ceilings)
#   precision  ResNet-50, 224 px, batch 256: fp32 / tf32 / fp16 / bf16 x channels_last off/on (eager)
#   batch      bf16 + channels_last at per-GPU batch 64, 128, 256, 384
#   compile    bf16 and fp16 + channels_last under torch.compile: default, max-autotune-no-cudagraphs
#   cudagraphs bf16 + channels_last under torch.compile mode reduce-overhead (CUDA graphs), twice: the
#              first run fills the compiled-code cache ($INDUCTOR_CACHE), the second reuses it; each
#              record's warmup_s is the compile time plus the warm-up steps
#   autotune   the same with max-autotune (CUDA graphs; compiling alone takes several minutes)
#   forms      the awkward files (CMYK, YCCK, grayscale, progressive, EXIF-rotated, PNG named .JPEG, empty,
#              truncated, too many pixels) through nvJPEG and the CPU pipeline: tests/test_input_forms.py with
#              TUTORIAL_TEST_DEVICE=cuda (needs pytest and pytest-timeout); prints each file's difference
#   data       JPEG loader: the trainer's CPU pipeline with 1..N workers vs the trainer's GPU input pipeline
#              (nvJPEG); generates a 100-class x 150-image ImageNet-like set of 500x375 JPEGs first (~1.7 GB)
#   e2e        bf16 + channels_last training fed from those JPEGs by the trainer's loaders, both input
#              pipelines (cpu, gpu), each with the same step on synthetic batches beside it
#   trainer    the trainer itself (--profile gpu) from the JPEG files with input_pipeline gpu, the same with
#              input_pipeline cpu and 16 workers, and on synthetic batches; `bench runs` turns each run's
#              steady-state step events into a record, with its fraction of the synthetic run
#   peer       the plain PyTorch loop $PEER_SCRIPT at bf16 + channels_last, compile none and default
#   course     make course PARAMS=notebooks/params/gpu.yaml (all eight notebooks), timed
#   allreduce  all-reduce bus bandwidth across this node's GPUs (needs >= 2 GPUs; skipped otherwise)
#   table      results/gpu_bench.md: every table, from the JSON lines
#
# Environment: PYTHON (default .venv/bin/python, else python3), RESULTS (default results),
# DATA_DIR (default data/fake_imagenet_gpu; point it at a real ImageNet to measure that instead),
# CLASSES and PER_CLASS (the generated set's size, 100 and 150), ARCH (resnet50), IMAGE (224), BATCH (256),
# STEPS (50), WARMUP (15), TRAINER_EPOCHS (3),
# TRAINER_STEPS (steps per epoch, 50), PEER_SCRIPT (default cluster_scripts/plain_pytorch_resnet50.py),
# INDUCTOR_CACHE (torch.compile's cache, default build/inductor-cache: a second run reuses compiled code).
# Results are appended as JSON lines to $RESULTS/gpu_<stage>.jsonl (one record per measurement,
# each naming the GPU, driver, CUDA, torch and every setting); remove old files to start over.
# Nothing here needs the network.
set -euo pipefail
SCRIPT="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
if [[ -n "${SLURM_JOB_ID:-}" ]]; then cd "$SLURM_SUBMIT_DIR"; else cd "$(dirname "$0")/.."; fi  # the repository root

if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
RESULTS=${RESULTS:-results}
DATA_DIR=${DATA_DIR:-data/fake_imagenet_gpu}
ARCH=${ARCH:-resnet50}
IMAGE=${IMAGE:-224}
BATCH=${BATCH:-256}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-15}
TRAINER_EPOCHS=${TRAINER_EPOCHS:-3}
TRAINER_STEPS=${TRAINER_STEPS:-50}
CLASSES=${CLASSES:-100}
PER_CLASS=${PER_CLASS:-150}
PEER_SCRIPT=${PEER_SCRIPT:-cluster_scripts/plain_pytorch_resnet50.py}
STAGES="env forms precision batch compile cudagraphs autotune data e2e trainer peer course allreduce table"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TORCHINDUCTOR_CACHE_DIR=${INDUCTOR_CACHE:-$PWD/build/inductor-cache}
if [[ " $* " == *" help "* || " $* " == *" --help "* || " $* " == *" -h "* ]]; then
    sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
fi
for stage in "$@"; do
    if [[ " $STAGES " != *" $stage "* ]]; then
        echo "unknown stage '$stage'. Stages: $STAGES (or help)" >&2
        exit 2
    fi
done
mkdir -p "$RESULTS" "$TORCHINDUCTOR_CACHE_DIR"

bench() { "$PYTHON" -m tutorial_lib.bench "$@"; }
train() {  # train OUTFILE [options...]
    local out=$1; shift
    bench train --device cuda --arch "$ARCH" --image-size "$IMAGE" --steps "$STEPS" --warmup "$WARMUP" \
        --out "$RESULTS/$out" "$@"
}
cpus=$("$PYTHON" -c 'import os; print(len(os.sched_getaffinity(0)))')
gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')
worker_list=$("$PYTHON" -c "n=$cpus; print(','.join(str(2**k) for k in range(n.bit_length()) if 2**k <= n))")

stage_env() {
    nvidia-smi || echo "(no nvidia-smi here)"
    "$PYTHON" -c 'import torch, torchvision; print("torch", torch.__version__, "CUDA", torch.version.cuda,
        "cuDNN", torch.backends.cudnn.version(), "torchvision", torchvision.__version__)'
    bench matmul --device cuda --dtype bfloat16,float16,float32 --out "$RESULTS/gpu_env.jsonl"
}
stage_forms() {
    TUTORIAL_TEST_DEVICE=cuda "$PYTHON" -m pytest -s -q -p no:cacheprovider tests/test_input_forms.py
}
stage_precision() {
    train gpu_precision.jsonl --batch-size "$BATCH" --precision fp32,tf32,fp16,bf16 --channels-last off,on
}
stage_batch() {
    train gpu_batch.jsonl --batch-size 64,128,256,384 --precision bf16 --channels-last on
}
stage_compile() {
    train gpu_compile.jsonl --batch-size "$BATCH" --precision bf16,fp16 --channels-last on \
        --compile default,max-autotune-no-cudagraphs
}
stage_autotune() {
    train gpu_compile.jsonl --batch-size "$BATCH" --precision bf16 --channels-last on --compile max-autotune
}
stage_cudagraphs() {
    local round
    for round in first second; do  # the second finds the first one's compiled code in $TORCHINDUCTOR_CACHE_DIR
        echo "cudagraphs, $round run: compiled-code cache $TORCHINDUCTOR_CACHE_DIR" \
             "($(find "$TORCHINDUCTOR_CACHE_DIR" -type f | wc -l) files)"
        train gpu_cudagraphs.jsonl --batch-size "$BATCH" --precision bf16 --channels-last on \
            --compile reduce-overhead --label "cudagraphs $round run"
    done
}
stage_data() {
    bench data --device cuda --data-dir "$DATA_DIR" --classes "$CLASSES" --per-class "$PER_CLASS" --workers "$worker_list" \
        --batch-size "$BATCH" --image-size "$IMAGE" --batches 16 --min-time 2 --repeats 3 --gpu-pipeline yes \
        --read-workers "$(( cpus < 16 ? cpus : 16 ))" --out "$RESULTS/gpu_data.jsonl"
}
stage_e2e() {
    local workers
    workers=$("$PYTHON" -c "n=$cpus; print(','.join(str(w) for w in sorted({min(8, n), min(16, n)})))")
    bench e2e --device cuda --data-dir "$DATA_DIR" --classes "$CLASSES" --per-class "$PER_CLASS" --arch "$ARCH" \
        --precision bf16 --channels-last on --batch-size "$BATCH" --image-size "$IMAGE" --steps 40 \
        --warmup "$WARMUP" --workers "$workers" --input-pipeline cpu,gpu --out "$RESULTS/gpu_e2e.jsonl"
}
stage_trainer() {
    local root="$RESULTS/tmp/trainer_runs" workers=$(( cpus < 16 ? cpus : 16 ))
    "$PYTHON" -c "from tutorial_lib.bench.fake_imagenet import prepare_fake_imagenet as p; p('$DATA_DIR', $CLASSES, $PER_CLASS)"
    local run  # fresh each time, so none resumes: only the files the trainer wrote are removed (else it stops)
    for run in jpeg_gpu_pipeline jpeg_cpu_pipeline synthetic; do
        "$PYTHON" -m tutorial_lib.rundir fresh "$root/$run" || return 1
    done
    run_trainer() {  # NAME [options...]
        local name=$1; shift
        "$PYTHON" -m tutorial_lib.train --profile gpu --arch "$ARCH" --image-size "$IMAGE" --batch-size "$BATCH" \
            --epochs "$TRAINER_EPOCHS" --warmup-epochs 0 --max-steps-per-epoch "$TRAINER_STEPS" --log-every 10 \
            --checkpoint false --progress false --output-root "$root" --name "$name" "$@"
    }
    run_trainer jpeg_gpu_pipeline --dataset imagefolder --data-dir "$DATA_DIR" --input-pipeline gpu \
        --workers "$workers"
    run_trainer jpeg_cpu_pipeline --dataset imagefolder --data-dir "$DATA_DIR" --input-pipeline cpu \
        --workers "$workers"
    run_trainer synthetic --dataset synthetic --synthetic-images "$(( BATCH * TRAINER_STEPS ))"
    bench runs "$root/synthetic" "$root/jpeg_gpu_pipeline" "$root/jpeg_cpu_pipeline" --reference "$root/synthetic" \
        --out "$RESULTS/gpu_trainer.jsonl"
}
stage_peer() {
    if [[ ! -f "$PEER_SCRIPT" ]]; then
        echo "peer: skipped, $PEER_SCRIPT not found (set PEER_SCRIPT to the plain PyTorch loop's path)"
        return 0
    fi
    local mode
    for mode in none default; do
        "$PYTHON" "$PEER_SCRIPT" --precision bf16 --channels-last 1 --compile "$mode" --batch "$BATCH" \
            | "$PYTHON" -c 'import json, sys, time
from tutorial_lib.bench import append_records, describe, environment_facts
env = environment_facts("cuda")
records = [{"kind": "peer", "status": "ok", **json.loads(line), "script": sys.argv[2], "env": env,
            "timestamp": time.time()} for line in sys.stdin if line.startswith("{")]
append_records(sys.argv[1], records)
print("\n".join(describe(r) for r in records))' "$RESULTS/gpu_peer.jsonl" "$PEER_SCRIPT"
    done
}
stage_course() {  # what `make course PARAMS=notebooks/params/gpu.yaml` runs, without make's setup step
    "$PYTHON" -m tutorial_lib.course --params notebooks/params/gpu.yaml --out executed-gpu
}
stage_allreduce() {
    if (( gpus < 2 )); then
        echo "allreduce: skipped, this node has $gpus GPU(s); run it on a node with several (or across nodes"
        echo "with torchrun --nnodes N ... -m tutorial_lib.bench allreduce)"
        return 0
    fi
    "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$gpus" -m tutorial_lib.bench allreduce \
        --out "$RESULTS/gpu_allreduce.jsonl"
}
stage_table() {
    shopt -s nullglob
    local files=("$RESULTS"/gpu_*.jsonl)
    if (( ${#files[@]} == 0 )); then echo "table: no $RESULTS/gpu_*.jsonl yet"; return 0; fi
    bench table "${files[@]}" --out "$RESULTS/gpu_bench.md"
}

read -r -a stages <<< "${*:-$STAGES}"
for stage in "${stages[@]}"; do
    echo "=== $stage ($(date +%H:%M:%S))"
    SECONDS=0
    "stage_$stage"
    echo "=== $stage done in ${SECONDS}s"
done
