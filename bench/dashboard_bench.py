#!/usr/bin/env python3
"""The dashboard page of a large cluster, loaded in headless Chromium (docs/benchmarks.md,
"vgpu-scheduler: the dashboard").

Starts tests/kube_api_server.py with NODES nodes of GPUS GPUs each and PODS bound pods
(random shares, their decisions in the API, as vgpu-scheduler writes them), starts
vgpu-scheduler against it, then opens /ui in Debian's chromium over the DevTools protocol
(python3-websocket) RUNS times and reads when the page had fetched /ui/state.json and
drawn everything: the page stamps performance.now() at the end of its first render
(data-render-ms, milliseconds since the navigation started). Also times /ui/state.json
and /metrics from a plain client.

usage: dashboard_bench.py VGPU_SCHEDULER_BINARY   (NODES=500 GPUS=8 PODS=12000 RUNS=7)
"""
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import scheduler_harness as H  # noqa: E402

try:
    import websocket  # Debian python3-websocket
except ImportError as exc:
    sys.exit("dashboard_bench: needs python3-websocket (%s)" % exc)

CHROMIUM = "/usr/bin/chromium"


def cluster_fixture(nodes, gpus, pods, seed=7):
    rng = random.Random(seed)
    node_objs = [H.node_object("node-%04d" % i, gpus, mem_mib=81559, slots=8)
                 for i in range(nodes)]
    free = {("node-%04d" % i, g): [81559, 100, 8] for i in range(nodes) for g in range(gpus)}
    keys = list(free)
    pod_objs = []
    for k in range(pods):
        for _ in range(20):
            node, g = rng.choice(keys)
            mem, cores = rng.choice([(4096, 10), (8192, 25), (16384, 30), (20000, 50),
                                     (2048, 5)])
            f = free[(node, g)]
            if f[0] >= mem and f[1] >= cores and f[2] > 0:
                f[0] -= mem
                f[1] -= cores
                f[2] -= 1
                break
        else:
            continue
        decision = {"version": 1, "node": node, "time": int(time.time()),
                    "containers": [{"name": "main", "gpus": [
                        {"uuid": "GPU-%s-%d" % (node, g), "memoryMiB": mem,
                         "cores": cores}]}]}
        pod = H.pod_object("p-%05d" % k, {"nvidia.com/gpu": "1",
                                          "nvidia.com/gpumem": str(mem),
                                          "nvidia.com/gpucores": str(cores)},
                           ns="team-%d" % (k % 7))
        pod["metadata"]["annotations"]["vgpu.io/decision"] = json.dumps(
            decision, sort_keys=True, separators=(",", ":"))
        pod["metadata"]["uid"] = "uid-%05d" % k
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        pod_objs.append(pod)
    return node_objs, pod_objs


class Browser:
    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="vgpu-bench-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--user-data-dir=" + self.profile,
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--window-size=1400,1100", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = None
        deadline = time.time() + 60
        while time.time() < deadline and port is None:
            line = self.proc.stderr.readline().decode(errors="replace")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
        if port is None:
            raise RuntimeError("chromium printed no DevTools address")
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port))
        page = [t for t in targets if t.get("type") == "page"][0]
        # No Origin header: some Chromium releases refuse DevTools clients that send one
        # unless --remote-allow-origins lets them (both, for every release).
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def evaluate(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r.get("result", {}).get("value")

    def load(self, url, timeout=60):
        """ms from navigation start to the first full render, as the page stamps it."""
        self.call("Page.navigate", url=url)
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.evaluate("document.location.href === %s && document.body && "
                              "document.body.getAttribute('data-render-ms')" % json.dumps(url))
            if v:
                return float(v)
            time.sleep(0.01)
        raise RuntimeError("the page never rendered")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(10)
            shutil.rmtree(self.profile, ignore_errors=True)


def timed_get(url, runs=5):
    times, size = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        body = urllib.request.urlopen(url).read()
        times.append((time.perf_counter() - t0) * 1000)
        size = len(body)
    return statistics.median(times), size


def main():
    binary = sys.argv[1]
    nodes, gpus = int(os.environ.get("NODES", 500)), int(os.environ.get("GPUS", 8))
    pods, runs = int(os.environ.get("PODS", 12000)), int(os.environ.get("RUNS", 7))
    node_objs, pod_objs = cluster_fixture(nodes, gpus, pods)
    c = H.Cluster(binary, node_objs, pod_objs)
    browser = None
    try:
        c.wait_ready(timeout=300)
        base = "http://127.0.0.1:%d" % c.port
        state = json.load(urllib.request.urlopen(base + "/ui/state.json"))
        cl = state["cluster"]
        print("cluster: %d nodes, %d GPUs, %d containers, %d pods bound, fragmentation %.3f"
              % (cl["nodes"], cl["gpus"], cl["containers"], cl["podsBound"],
                 cl["fragmentation"]))
        st_ms, st_size = timed_get(base + "/ui/state.json")
        m_ms, m_size = timed_get(base + "/metrics")
        print("/ui/state.json: %.1f ms median, %d bytes" % (st_ms, st_size))
        print("/metrics:       %.1f ms median, %d bytes" % (m_ms, m_size))
        browser = Browser()
        browser.call("Page.enable")
        browser.load(base + "/ui?warm")  # chromium's own start-up out of the figures
        loads = [browser.load(base + "/ui?run=%d" % i) for i in range(runs)]
        print("page load to full render (Chromium, %d runs): median %.0f ms, max %.0f ms"
              % (runs, statistics.median(loads), max(loads)))
        print("  runs: " + " ".join("%.0f" % x for x in loads))
        if statistics.median(loads) > 1000:
            print("FAIL: the page took over 1 s")
            return 1
        return 0
    finally:
        if browser is not None:
            browser.close()
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
