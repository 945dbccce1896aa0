"""Peer baseline on the GPU: the plain PyTorch ResNet-50 loop a user would write from the docs.

torchvision resnet50, SGD momentum, autocast (bf16 or fp16+GradScaler), optional channels_last and
torch.compile, synthetic batches on the device. Prints one JSON line per setting.

Where it came from: the measuring stick the development team kept beside the project (shared/peers/ on the
development machines), written independently of tutorial_lib and run as `gpu_bench.sh peer` for the H100
table in results/h100-2026-11-22.md. Copied here unchanged apart from this docstring, so that a clone can
rerun that comparison; it still imports nothing from the project, and must not.
    python cluster_scripts/plain_pytorch_resnet50.py --precision bf16 --channels-last 1 --compile none --batch 256
"""
import argparse
import json
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--precision", default="bf16")
p.add_argument("--channels-last", type=int, default=1)
p.add_argument("--compile", default="none")
p.add_argument("--batch", type=int, default=256)
p.add_argument("--steps", type=int, default=60)
p.add_argument("--warmup", type=int, default=20)
a = p.parse_args()

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
dev = torch.device("cuda")
model = torchvision.models.resnet50().to(dev)
fmt = torch.channels_last if a.channels_last else torch.contiguous_format
model = model.to(memory_format=fmt)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
crit = torch.nn.CrossEntropyLoss()
scaler = torch.amp.GradScaler(enabled=a.precision == "fp16")
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
fwd = torch.compile(model, mode=a.compile) if a.compile != "none" else model
x = torch.randn(a.batch, 3, 224, 224, device=dev).to(memory_format=fmt)
y = torch.randint(0, 1000, (a.batch,), device=dev)


def step():
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
        loss = crit(fwd(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


t0 = time.time()
for _ in range(a.warmup):
    step()
torch.cuda.synchronize()
warm_s = time.time() - t0
t0 = time.time()
for _ in range(a.steps):
    step()
torch.cuda.synchronize()
dt = time.time() - t0
print(json.dumps({"peer": "plain-pytorch", "device": torch.cuda.get_device_name(), "arch": "resnet50",
                  "precision": a.precision, "channels_last": bool(a.channels_last), "compile": a.compile,
                  "batch": a.batch, "images_per_sec": round(a.steps * a.batch / dt, 1),
                  "warmup_s": round(warm_s, 1), "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                  "torch": torch.__version__}))
