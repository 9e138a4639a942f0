"""vgpu-device-plugin dynamic MIG benchmark (bench/deviceplugin_mig.sh BUILD): the daemon
in `vgpu.migMode: dynamic` on fakegpu (two H100 80GB in MIG mode without instances),
driven by the fake kubelet of tests/integration/deviceplugin_kubelet.py and
tests/kube_api_server.py. Prints a markdown table.

- Allocate to a ready instance: ROUNDS rounds of seven pods, each with a decision for a
  1g.10gb at start 0..6 of GPU 0; once the plugin's pod watch has the pod (an Allocate
  answered "no scheduling decision" is retried and not timed), the Allocate round trip as
  the Python client sees it, which covers checking the placement, making the GPU instance
  and its compute instance through NVML, reading them back and the container directory.
  The answer names the MIG device, which is then usable (checked once per round with
  `fakegpu-ctl status`).
- Pod deleted to instance destroyed: the seven pods deleted one by one, time until the
  instance is gone from `fakegpu-ctl status` (polled every 10 ms).

Exits non-zero when an instance outlives its pod by more than 5 s (docs/deviceplugin.md:
"destroyed when its pod is gone (within 5 s)") or an Allocate fails.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BUILD, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import deviceplugin_kubelet as k  # noqa: E402

k.BUILD, k.SOURCE = BUILD, SOURCE
k.load_messages(os.path.join(BUILD, "gen", "grpc", "kubelet", "api.desc"))
ROUNDS = int(os.environ.get("ROUNDS", "10"))
H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"
CONFIG = "version: v1\nvgpu:\n  deviceSplitCount: 7\n  migMode: dynamic\n"
TEARDOWN_BOUND_S = 5.0


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def status(env):
    return subprocess.run([os.path.join(BUILD, "bin", "fakegpu-ctl"), "status"], env=env,
                          capture_output=True, text=True, check=True).stdout


def main():
    tmp = tempfile.mkdtemp(prefix="dp-mig-bench.")
    os.makedirs(os.path.join(tmp, "kubelet"))
    api = k.ApiServer(tmp)
    kubelet = k.FakeKubelet(os.path.join(tmp, "kubelet"))
    plugin = k.Plugin(tmp, CONFIG, kubeconfig=api.kubeconfig,
                      extra_env={"FAKEGPU_DEVICES": H100 + "," + H100, "FAKEGPU_MIG": "0:;1:"})
    missed = []
    try:
        k.wait_for(lambda: kubelet.registrations and kubelet.registrations[0][1],
                   what="registration")
        ids = sorted(d for d, _ in k.wait_for(lambda: kubelet.latest("nvidia.com/gpu"),
                                                what="list"))
        gpu0 = status(plugin.env).splitlines()[0].split()[1]
        dev = [d for d in ids if d.startswith(gpu0 + "-")][:1]
        alloc, teardown = [], []
        for r in range(ROUNDS):
            names = []
            for start in range(7):
                name = "p%d-%d" % (r, start)
                decision = json.dumps({"version": 1, "node": "node-1", "time": int(time.time()),
                                       "containers": [{"name": "main", "gpus": [
                                           {"uuid": gpu0, "memoryMiB": 9984, "cores": 0,
                                            "mig": {"profile": "1g.10gb", "start": start}}]}]})
                api.add_pod(name, decision)
                names.append(name)
                while True:
                    t = time.perf_counter()
                    try:
                        resp = kubelet.allocate("nvidia.com/gpu", dev)
                    except k.grpc.RpcError as e:
                        if "no scheduling decision" not in e.details():
                            raise
                        time.sleep(0.005)
                        continue
                    alloc.append(time.perf_counter() - t)
                    break
                mig = dict(resp.container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"]
                if not mig.startswith("MIG-"):
                    raise AssertionError("no MIG device: %s" % mig)
            if status(plugin.env).count(" mig ") != 7:
                raise AssertionError("not seven MIG devices:\n" + status(plugin.env))
            for name in names:
                before = status(plugin.env).count(" mig ")
                t = time.perf_counter()
                api.request("DELETE", "/api/v1/namespaces/default/pods/" + name)
                while status(plugin.env).count(" mig ") >= before:
                    if time.perf_counter() - t > 30:
                        raise AssertionError("instance of %s never destroyed" % name)
                    time.sleep(0.01)
                teardown.append(time.perf_counter() - t)
        if max(teardown) > TEARDOWN_BOUND_S:
            missed.append("pod deleted to instance destroyed, max %.3f s > %g s"
                          % (max(teardown), TEARDOWN_BOUND_S))
        print("| dynamic MIG on fakegpu (2 × H100 80GB) | figure |")
        print("| --- | --- |")
        print("| Allocate to a ready 1g.10gb instance (%d Allocates, Python client) | "
              "p50 %.2f ms, p99 %.2f ms, max %.2f ms |"
              % (len(alloc), pct(alloc, 50) * 1e3, pct(alloc, 99) * 1e3, max(alloc) * 1e3))
        print("| Pod deleted to instance destroyed (%d pods; 10 ms polling of fakegpu-ctl) | "
              "p50 %.0f ms, max %.0f ms (bound 5 s) |"
              % (len(teardown), pct(teardown, 50) * 1e3, max(teardown) * 1e3))
    finally:
        plugin.stop()
        kubelet.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    for m in missed:
        print("MISSED: " + m, file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
