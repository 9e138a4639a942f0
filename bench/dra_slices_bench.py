"""vgpu-dra-plugin: ResourceSlice publication time after a GPU health change
(bench/dra_plugin.sh).

    /usr/bin/python3 dra_slices_bench.py BUILD SOURCE DESCRIPTOR [N]

Runs the plugin on fakegpu against tests/kube_api_server.py (health polled every 100 ms,
VGPU_DRA_HEALTH_INTERVAL_MS) and toggles GPU 1 off the bus and back N times (default
20 each way) with fakegpu-ctl. For each change it measures, on the wall clock:
  end to end  from `fakegpu-ctl health` returning to the API server listing the changed
              slice (polled every 2 ms): detection (up to one poll interval) + publication;
  publication from the plugin's log line of the change (its millisecond timestamp) to
              the slice listed: the rebuild, the list, the PUT, as the API server sees it.
Prints a markdown table of medians and p90s.
"""
import datetime
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

SOURCE = sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tests", "dra"))
import dra_kubelet as t  # noqa: E402

LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z.*GPU (unhealthy|healthy again)")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def log_times(text):
    out = []
    for m in LINE.finditer(text):
        ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
        out.append(ts.replace(tzinfo=datetime.timezone.utc).timestamp())
    return out


def main():
    t.BUILD, t.SOURCE = sys.argv[1], SOURCE
    t.load_messages(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    tmp = tempfile.mkdtemp(prefix="vgpu-dra-slices-bench-")
    api = t.ApiServer(tmp)
    kubeconfig = os.path.join(tmp, "kubeconfig")
    t.kubeconfig_for(kubeconfig, api.port)
    plugin = t.Plugin(tmp, kubeconfig)
    ctl = os.path.join(t.BUILD, "bin", "fakegpu-ctl")
    e2e, pub = [], []

    def count():
        return sum(len(s["spec"]["devices"]) for s in api.slices())

    try:
        t.wait_for(lambda: count() == 2, what="first publication")
        for i in range(2 * n):
            want = 1 if i % 2 == 0 else 2
            time.sleep(random.uniform(0, 0.1))  # out of phase with the health poll
            subprocess.run([ctl, "health", "1", "off" if want == 1 else "on"], env=plugin.env,
                           check=True, capture_output=True, timeout=30)
            start = time.time()
            while count() != want:
                time.sleep(0.002)
            seen = time.time()
            logged = t.wait_for(lambda: len(log_times(plugin.output())) > i and
                                log_times(plugin.output()), what="log line")[i]
            e2e.append((seen - start) * 1000)
            pub.append((seen - logged) * 1000)
    finally:
        plugin.stop()
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| health change -> ResourceSlice listed (%d changes) | median ms | p90 ms |"
          % len(e2e))
    print("| --- | --- | --- |")
    print("| end to end (poll interval 100 ms) | %.1f | %.1f |" % (pct(e2e, 50), pct(e2e, 90)))
    print("| publication (plugin's log line -> listed) | %.1f | %.1f |"
          % (pct(pub, 50), pct(pub, 90)))


if __name__ == "__main__":
    main()
