#!/usr/bin/env bash
# The full single-node GPU measurement set (written for one H100/H200; any CUDA GPU works).
#
#   bash cluster_scripts/gpu_bench.sh                 # every stage below, in order
#   bash cluster_scripts/gpu_bench.sh precision data  # only some stages (each well under 10 minutes,
#                                                     # except autotune)
#   sbatch --gpus-per-node=1 --cpus-per-task=16 --time=02:00:00 cluster_scripts/gpu_bench.sh  # from the repo root
#
# Stages:
#   env        nvidia-smi, torch/CUDA versions and the dense bf16/fp32 matmul rates (the ceilings)
#   precision  ResNet-50, 224 px, batch 256: fp32 / tf32 / fp16 / bf16 x channels_last off/on (eager)
#   batch      bf16 + channels_last at per-GPU batch 64, 128, 256, 384
#   compile    bf16 and fp16 + channels_last under torch.compile: default, max-autotune-no-cudagraphs
#   autotune   the same with max-autotune (CUDA graphs; compiling alone takes several minutes)
#   data       JPEG loader: CPU DataLoader with 1..N workers vs nvJPEG decoding on the GPU
#              (generates a 100-class x 150-image ImageNet-like set of 500x375 JPEGs first, ~1.7 GB)
#   e2e        bf16 + channels_last training fed from those JPEGs by the trainer's loader, per worker count
#   allreduce  all-reduce bus bandwidth across this node's GPUs (needs >= 2 GPUs; skipped otherwise)
#   table      results/gpu_bench.md: every table, from the JSON lines
#
# Environment: PYTHON (default .venv/bin/python, else python3), RESULTS (default results),
# DATA_DIR (default data/fake_imagenet_gpu; point it at a real ImageNet to measure that instead),
# ARCH (resnet50), IMAGE (224), BATCH (256), STEPS (50), WARMUP (15).
# Results are appended as JSON lines to $RESULTS/gpu_<stage>.jsonl (one record per measurement,
# each naming the GPU, driver, CUDA, torch and every setting); remove old files to start over.
set -euo pipefail
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
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$RESULTS"

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
stage_data() {
    bench data --device cuda --data-dir "$DATA_DIR" --classes 100 --per-class 150 --workers "$worker_list" \
        --batch-size "$BATCH" --image-size "$IMAGE" --batches 64 --read-threads "$cpus" \
        --out "$RESULTS/gpu_data.jsonl"
}
stage_e2e() {
    local workers
    workers=$("$PYTHON" -c "n=$cpus; print(','.join(str(w) for w in (4, 8, 16, n) if w <= n))" | tr ',' '\n' \
              | sort -nu | paste -sd, -)
    bench e2e --device cuda --data-dir "$DATA_DIR" --classes 100 --per-class 150 --arch "$ARCH" \
        --precision bf16 --channels-last on --batch-size "$BATCH" --image-size "$IMAGE" --steps 40 \
        --warmup "$WARMUP" --workers "$workers" --out "$RESULTS/gpu_e2e.jsonl"
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

stages=("$@")
if (( ${#stages[@]} == 0 )); then
    stages=(env precision batch compile autotune data e2e allreduce table)
fi
for stage in "${stages[@]}"; do
    if ! declare -F "stage_$stage" >/dev/null; then
        echo "unknown stage '$stage'. Stages: env precision batch compile autotune data e2e allreduce table" >&2
        exit 2
    fi
done
for stage in "${stages[@]}"; do
    echo "=== $stage ($(date +%H:%M:%S))"
    SECONDS=0
    "stage_$stage"
    echo "=== $stage done in ${SECONDS}s"
done
