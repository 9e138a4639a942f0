"""A PyTorch compute tenant for tests/gpu/compute.sh (libvgpu's compute shares).

    compute_torch.py matmul|graph SECONDS WARMUP_SECONDS

matmul: a loop of 2048 x 2048 fp32 matmuls, synchronising every 8. graph: the same 8
matmuls captured once in a CUDA graph and replayed. Prints "iters=<n> window_s=<s>": the
iterations (8 matmuls each) completed after the warm-up and the wall time that took. The
ground truth is iters x the time one iteration takes alone (the calibration run of the
same script, without libvgpu or any other tenant), so preemption by other contexts is not
counted as this tenant's GPU time.
"""

import sys
import time

import torch


def main():
    mode, seconds, warmup = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    if mode not in ("matmul", "graph"):
        raise SystemExit("compute_torch.py: mode must be matmul or graph")
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    b = torch.randn(2048, 2048, device=dev)
    out = torch.empty(2048, 2048, device=dev)

    def step():
        for _ in range(8):
            torch.matmul(a, b, out=out)

    if mode == "graph":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()  # warm the kernels up outside the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        run = g.replay
    else:
        run = step
    torch.cuda.synchronize()
    start = time.monotonic()
    stop = start + seconds
    window_start = start + warmup
    iters = 0
    counting = False
    while True:
        run()
        torch.cuda.synchronize()
        now = time.monotonic()
        if not counting and now >= window_start:
            counting, window_start = True, now
        elif counting:
            iters += 1
        if now >= stop:
            break
    print(f"iters={iters} window_s={now - window_start:.6f}")


if __name__ == "__main__":
    main()
