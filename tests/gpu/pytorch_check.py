"""PyTorch under libvgpu on a real GPU: the app sees its limit and is held to it.

Run by tests/gpu/run.sh with LD_PRELOAD=libvgpu.so and CUDA_DEVICE_MEMORY_LIMIT set;
prints one line per check and exits non-zero if any fails. PyTorch reaches the driver
through the CUDA runtime's cuGetProcAddress, so this is the path most users take."""
import os
import sys

import torch

limit = int(os.environ["VGPU_EXPECT_LIMIT"])
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


free, total = torch.cuda.mem_get_info()
check(total == limit, f"mem_get_info total {total} == limit {limit}")
check(0 < free <= total, f"mem_get_info free {free} within (0, total]")

chunk = 256 << 20
held = []
try:
    while True:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
got = len(held) * chunk
check(got <= limit, f"allocated {got} bytes before OOM, not over the limit {limit}")
check(got >= limit - 2 * chunk - (1 << 30), f"allocated {got} bytes: close to the limit")
held.clear()
torch.cuda.empty_cache()
x = torch.ones(64 << 20, device="cuda")
check(float(x.sum()) == float(64 << 20), "the process keeps working after the OOM")
sys.exit(1 if failures else 0)
