#!/usr/bin/env python3
"""Stand-ins for the paper's sweep workloads that the data directory does not hold.

The openb release ships 17 pod lists; the FGD paper's sweeps use cpu200, cpu250,
gpushare80, gpushare100, gpuspec20, gpuspec25, gpuspec33, multigpu40 and multigpu50 too.
This script draws look-alikes of those nine from openb_pod_list_default.csv, following
how the released variants relate to it (docs/openb.md, "Files and schemas"):

  cpuN       the default's GPU pods unchanged, CPU-only pods drawn from the default's
             until they are N/10 % of all pods (cpu200: 20 %)
  gpushareN  the default's 1,088 CPU-only pods; GPU pods drawn so that sharing pods carry
             N % of the GPU request and multi-GPU pods the paper's share (80: 2.5 %,
             100: none), 7,064 GPU pods in all
  gpuspecN   the default with gpu_spec filled in on random GPU pods until they carry the
             paper's share of the GPU request (20: 20.4 %, 25: 25.9 %, 33: 34.8 %); each
             spec drawn from those gpuspec10 gives pods of the same kind (sharing, one
             whole GPU, several GPUs)
  multigpuN  the default plus multi-GPU pods drawn from its own until they carry N % of
             the GPU request

They are not the paper's files: a policy's figures on them are an estimate of how it
does on workloads it was not tuned on, not a comparison with the paper's numbers.

Names from the released set (cpu235, gpushare40, ...) can be drawn the same way, to
check a recipe against the real file. Draws are seeded per name.

usage: openb_variants.py DATA_DIR OUT_DIR [WORKLOAD...]
"""
import csv
import os
import random
import sys

SEED = 2023
FIELDS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def load(path):
    with open(path, newline="") as f:
        return [{k: r[k] for k in FIELDS} for r in csv.DictReader(f)]


def kind(r):
    if r["num_gpu"] == "0":
        return "cpu"
    if int(r["num_gpu"]) > 1:
        return "multi"
    return "share" if int(r["gpu_milli"]) < 1000 else "whole"


def gpus(r):
    return int(r["num_gpu"]) * int(r["gpu_milli"]) / 1000.0


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow(dict(r, name="openb-pod-%04d" % i))


def by_kind(rows):
    out = {"cpu": [], "share": [], "whole": [], "multi": []}
    for r in rows:
        out[kind(r)].append(r)
    return out


def cpu_variant(rng, pods, pct):
    k = by_kind(pods)
    gpu_pods = k["share"] + k["whole"] + k["multi"]
    want = round(len(gpu_pods) * pct / (100 - pct))
    rows = gpu_pods + [rng.choice(k["cpu"]) for _ in range(want)]
    rng.shuffle(rows)
    return rows


def share_variant(rng, pods, pct, multi_pct):
    k = by_kind(pods)
    total_pods = len(pods) - len(k["cpu"])
    mean = {c: sum(gpus(r) for r in k[c]) / len(k[c]) for c in ("share", "whole", "multi")}
    # Solve for the pod counts: n_s + n_w + n_m = total_pods, with sharing and multi-GPU
    # pods carrying pct and multi_pct of the request.
    fs, fm = pct / 100.0, multi_pct / 100.0
    fw = 1.0 - fs - fm
    per_gpu = fs / mean["share"] + fm / mean["multi"] + fw / mean["whole"]
    request = total_pods / per_gpu
    n_s = round(request * fs / mean["share"])
    n_m = round(request * fm / mean["multi"])
    n_w = total_pods - n_s - n_m
    rows = list(k["cpu"])
    rows += [rng.choice(k["share"]) for _ in range(n_s)]
    rows += [rng.choice(k["whole"]) for _ in range(n_w)]
    rows += [rng.choice(k["multi"]) for _ in range(n_m)]
    rng.shuffle(rows)
    return rows


def spec_variant(rng, pods, spec10, pct):
    specs = {"share": [], "whole": [], "multi": []}
    for r in spec10:
        if r["gpu_spec"]:
            specs[kind(r)].append(r["gpu_spec"])
    rows = [dict(r) for r in pods]
    total = sum(gpus(r) for r in rows)
    order = [i for i, r in enumerate(rows) if kind(r) != "cpu"]
    rng.shuffle(order)
    covered = 0.0
    for i in order:
        if covered >= total * pct / 100.0:
            break
        rows[i]["gpu_spec"] = rng.choice(specs[kind(rows[i])])
        covered += gpus(rows[i])
    return rows


def multi_variant(rng, pods, pct):
    k = by_kind(pods)
    rows = list(pods)
    multi = sum(gpus(r) for r in k["multi"])
    rest = sum(gpus(r) for r in rows) - multi
    while multi < rest * pct / (100.0 - pct):
        r = rng.choice(k["multi"])
        rows.append(r)
        multi += gpus(r)
    return rows


HELD_OUT = ["cpu200", "cpu250", "gpushare80", "gpushare100", "gpuspec20", "gpuspec25",
            "gpuspec33", "multigpu40", "multigpu50"]
# The paper's shares for the variants that are not a plain percentage of the name.
MULTI_IN_SHARE = {20: 8.8, 40: 6.7, 60: 3.3, 80: 2.5, 100: 0.0}
SPEC_SHARE = {5: 5.6, 10: 10.9, 20: 20.4, 25: 25.9, 33: 34.8}


def make(rng, name, pods, spec10):
    for prefix in ("cpu", "gpushare", "gpuspec", "multigpu"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            n = int(name[len(prefix):])
            break
    else:
        sys.exit("unknown workload %s" % name)
    if prefix == "cpu":
        return cpu_variant(rng, pods, n / 10.0)
    if prefix == "gpushare" and n in MULTI_IN_SHARE:
        return share_variant(rng, pods, n, MULTI_IN_SHARE[n])
    if prefix == "gpuspec" and n in SPEC_SHARE:
        return spec_variant(rng, pods, spec10, SPEC_SHARE[n])
    if prefix == "multigpu":
        return multi_variant(rng, pods, n)
    sys.exit("no recipe for %s" % name)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    data, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or HELD_OUT
    pods = load(os.path.join(data, "openb_pod_list_default.csv"))
    spec10 = load(os.path.join(data, "openb_pod_list_gpuspec10.csv"))
    os.makedirs(out, exist_ok=True)
    for name in names:
        rng = random.Random("%s-%s" % (SEED, name))
        rows = make(rng, name, pods, spec10)
        write(os.path.join(out, "openb_pod_list_%s.csv" % name), rows)
        k = by_kind(rows)
        req = sum(gpus(r) for r in rows)
        print("%-12s %5d pods, GPU request %6.1f (%5.1f %% of 6,212), sharing %4.1f %%, "
              "multi-GPU %4.1f %%, CPU-only %4.1f %% of pods, gpu_spec %4.1f %%" % (
                  name, len(rows), req, 100 * req / 6212,
                  100 * sum(gpus(r) for r in k["share"]) / req,
                  100 * sum(gpus(r) for r in k["multi"]) / req,
                  100 * len(k["cpu"]) / len(rows),
                  100 * sum(gpus(r) for r in rows if r["gpu_spec"]) / req))


if __name__ == "__main__":
    main()
