#!/usr/bin/env python3
"""vgpu-scheduler's allocation metrics, dashboard page and explain route, against the test
API server (tests/kube_api_server.py) with a few nodes and pods decided the way
kube-scheduler decides them (filter, prioritize, bind).

  MetricsTest    /metrics passes `promtool check metrics`; every hami_* and vgpu_* figure
                 equals what the decisions in the API add up to, computed here
                 independently from the node inventories and the pods' vgpu.io/decision;
                 --hami-legacy-metrics adds HAMi's older names with the same values.
  PageTest       /ui loaded in headless Chromium (Debian's chromium) shows the same numbers
                 as the state (cluster cards, per-GPU rows, containers, pending pods with
                 their reasons, the held time a node's inventory reports beside its
                 container); a screenshot is kept in OUT_DIR.
  ExplainTest    /ui/explain says where a pod went and why another is pending.
  BadInputTest   garbage, oversized and unknown requests on /ui paths get clear 4xx
                 answers, are counted, and the scheduler keeps serving.

usage: dashboard_test.py VGPU_SCHEDULER_BINARY OUT_DIR [unittest args]
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import scheduler_harness as H  # noqa: E402
import vg_skip  # noqa: E402

BINARY = None
OUT_DIR = None
MIB = 1 << 20
CHROMIUM = "/usr/bin/chromium"
PROMTOOL = "/usr/bin/promtool"

NODES = [H.node_object("node-a", 2),
         H.node_object("node-b", 4, mem_mib=24000, model="NVIDIA A10"),
         H.node_object("node-c", 1, healthy=False)]
NAMES = ["node-a", "node-b", "node-c"]
PODS = [  # name, namespace, limits
    ("train-0", "default", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000",
                            "nvidia.com/gpucores": "30"}),
    ("train-1", "default", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000",
                            "nvidia.com/gpucores": "50"}),
    ("pair", "team-b", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000",
                        "nvidia.com/gpucores": "20"}),
    ("whole", "team-b", {"nvidia.com/gpu": "1"}),
]
TOO_BIG = ("huge", "default", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "900000"})
NEVER_FILTERED = ("later", "default", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})


missing = vg_skip.skip_test


def start_cluster(extra_args=()):
    c = H.Cluster(BINARY, NODES, extra_args=list(extra_args))
    c.wait_ready()
    conn = H.Http(c.port)
    for name, ns, limits in PODS + [TOO_BIG]:
        pod = c.create_pod(H.pod_object(name, limits, ns=ns))
        got, body = c.filter(conn, pod, NAMES)
        if got:
            scores = c.prioritize(conn, pod, got)
            best = max(scores, key=lambda s: s["Score"])["Host"]
            assert c.bind(conn, pod, best) == "", body
    name, ns, limits = NEVER_FILTERED
    c.create_pod(H.pod_object(name, limits, ns=ns))
    # The watch shows every binding before the figures are read.
    deadline = time.time() + 30
    while time.time() < deadline:
        st = c.ext.request("GET", "/ui/state.json")[1]
        if st["cluster"]["podsBound"] == len(PODS) and st["cluster"]["podsPending"] == 2:
            return c, conn
        time.sleep(0.05)
    raise AssertionError("the scheduler never showed the bound pods")


def expected(c):
    """Per GPU and per node figures summed from the API alone: inventories and the
    decisions of bound pods (what the scheduler must show)."""
    gpus, nodes, ctrs = {}, {}, []
    for node in c.list("nodes"):
        inv = json.loads(node["metadata"]["annotations"]["vgpu.io/gpus"])
        name = node["metadata"]["name"]
        nodes[name] = [g["uuid"] for g in inv["gpus"]]
        for g in inv["gpus"]:
            gpus[g["uuid"]] = {"node": name, "index": g["index"], "model": g["model"],
                               "mem_total": g["memoryMiB"] * MIB, "mem": 0, "cores": 0,
                               "tenants": 0, "healthy": g["healthy"], "slots": g["slots"]}
    for pod in c.list("pods"):
        ann = pod["metadata"].get("annotations", {}).get("vgpu.io/decision")
        if not ann or not pod["spec"].get("nodeName"):
            continue
        d = json.loads(ann)
        for k, ctr in enumerate(d["containers"]):
            for share in ctr["gpus"]:
                g = gpus[share["uuid"]]
                g["mem"] += share["memoryMiB"] * MIB
                g["cores"] += share["cores"]
                g["tenants"] += 1
                ctrs.append((pod["metadata"]["namespace"], pod["metadata"]["name"], k,
                             ctr["name"], share["uuid"], share["memoryMiB"] * MIB,
                             share["cores"]))
    for g in gpus.values():
        free = 1 - g["cores"] / 100
        partly = g["tenants"] > 0 and free > 0
        g["stranded"] = free if partly else 0.0
        g["stranded_mem"] = g["mem_total"] - g["mem"] if partly else 0
    return gpus, nodes, ctrs


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of the exposition text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                      m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def series(metrics, name, **want):
    """The one value of name whose labels include want."""
    hits = [v for (n, labels), v in metrics.items()
            if n == name and all((k, str(w)) in labels for k, w in want.items())]
    assert len(hits) == 1, (name, want, hits)
    return hits[0]


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, cls.conn = start_cluster()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def scrape(self, conn=None):
        status, text = (conn or self.conn).request("GET", "/metrics", raw=True)
        self.assertEqual(status, 200)
        return text.decode()

    def test_promtool_accepts_the_exposition(self):
        if not os.access(PROMTOOL, os.X_OK):
            missing(PROMTOOL + " (Debian package prometheus)")
        text = self.scrape()
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout.decode() + r.stderr.decode())
        self.assertEqual(r.stdout.strip() + r.stderr.strip(), b"")

    def test_figures_equal_the_decisions_in_the_api(self):
        gpus, nodes, ctrs = expected(self.c)
        m = parse_metrics(self.scrape())
        for uuid, g in gpus.items():
            hami = dict(node=g["node"], device_uuid=uuid, device_index=g["index"],
                        device_type=g["model"], zone="vGPU")
            dcgm = dict(Hostname=g["node"], UUID=uuid, gpu=g["index"], model_name=g["model"])
            self.assertEqual(series(m, "hami_gpu_memory_limit_bytes", **hami), g["mem_total"])
            self.assertEqual(series(m, "hami_gpu_memory_allocated_bytes", **hami), g["mem"])
            self.assertEqual(series(m, "hami_gpu_core_limit_ratio", **hami), 100)
            self.assertEqual(series(m, "hami_gpu_core_allocated_ratio", **hami), g["cores"])
            self.assertAlmostEqual(series(m, "hami_node_gpu_memory_allocated_ratio", **hami),
                                   g["mem"] / g["mem_total"])
            self.assertEqual(series(m, "vgpu_scheduler_gpu_memory_total_bytes", **dcgm),
                             g["mem_total"])
            self.assertEqual(series(m, "vgpu_scheduler_gpu_memory_allocated_bytes", **dcgm),
                             g["mem"])
            self.assertAlmostEqual(series(m, "vgpu_scheduler_gpu_compute_allocated_ratio",
                                          **dcgm), g["cores"] / 100)
            self.assertEqual(series(m, "vgpu_scheduler_gpu_containers", **dcgm), g["tenants"])
            self.assertEqual(series(m, "vgpu_scheduler_gpu_healthy", **dcgm),
                             1 if g["healthy"] else 0)
            self.assertAlmostEqual(series(m, "vgpu_scheduler_gpu_stranded_compute_ratio",
                                          **dcgm), g["stranded"])
            self.assertEqual(series(m, "vgpu_scheduler_gpu_stranded_memory_bytes", **dcgm),
                             g["stranded_mem"])
            # The names that were there before stay, with their values.
            self.assertEqual(series(m, "vgpu_scheduler_gpu_memory_used_mib", node=g["node"],
                                    uuid=uuid), g["mem"] / MIB)
            self.assertEqual(series(m, "vgpu_scheduler_gpu_tenants", node=g["node"],
                                    uuid=uuid), g["tenants"])
        total_free = total_stranded = 0
        for node, uuids in nodes.items():
            free = sum(1 - gpus[u]["cores"] / 100 for u in uuids)
            stranded = sum(gpus[u]["stranded"] for u in uuids)
            total_free += free
            total_stranded += stranded
            self.assertAlmostEqual(series(m, "vgpu_scheduler_node_stranded_compute_gpus",
                                          Hostname=node), stranded)
            self.assertAlmostEqual(series(m, "vgpu_scheduler_node_fragmentation_ratio",
                                          Hostname=node), stranded / free if free else 0)
            self.assertEqual(series(m, "vgpu_scheduler_node_gpus", Hostname=node), len(uuids))
        self.assertGreater(total_stranded, 0)  # the scenario has partly used GPUs
        self.assertAlmostEqual(series(m, "vgpu_scheduler_cluster_stranded_compute_gpus"),
                               total_stranded)
        self.assertAlmostEqual(series(m, "vgpu_scheduler_cluster_fragmentation_ratio"),
                               total_stranded / total_free)
        self.assertEqual(series(m, "vgpu_scheduler_pending_pods"), 2)
        self.assertEqual(len(ctrs), 5)  # pair holds two GPUs
        for ns, pod, k, ctr, uuid, mem, cores in ctrs:
            node = gpus[uuid]["node"]
            self.assertEqual(series(m, "hami_vgpu_memory_allocated_bytes", namespace=ns,
                                    pod=pod, node=node, container_index=k,
                                    device_uuid=uuid), mem)
            self.assertEqual(series(m, "hami_vgpu_core_allocated_ratio", namespace=ns, pod=pod,
                                    node=node, container_index=k, device_uuid=uuid), cores)
            self.assertEqual(series(m, "vgpu_scheduler_container_memory_allocated_bytes",
                                    namespace=ns, pod=pod, container=ctr, Hostname=node,
                                    UUID=uuid, state="bound"), mem)
            self.assertAlmostEqual(series(m, "vgpu_scheduler_container_compute_allocated_ratio",
                                          namespace=ns, pod=pod, container=ctr, Hostname=node,
                                          UUID=uuid), cores / 100)
        # HAMi's lint-refused names only on request.
        self.assertNotIn("GPUDeviceMemoryLimit", self.scrape())

    def test_hami_legacy_names_on_request(self):
        c = H.Cluster(BINARY, NODES, extra_args=["--hami-legacy-metrics"])
        try:
            c.wait_ready()
            conn = H.Http(c.port)
            pod = c.create_pod(H.pod_object("one", PODS[0][2]))
            got, body = c.filter(conn, pod, NAMES)
            self.assertEqual(c.bind(conn, pod, got[0]), "")
            gpus, _, _ = expected(c)
            deadline = time.time() + 20
            while True:
                m = parse_metrics(self.scrape(conn))
                if series(m, "vgpu_scheduler_pods", state="bound") == 1 or \
                        time.time() > deadline:
                    break
                time.sleep(0.05)
            for uuid, g in gpus.items():
                old = dict(nodeid=g["node"], deviceuuid=uuid, deviceidx=g["index"],
                           devicetype=g["model"], zone="vGPU")
                self.assertEqual(series(m, "GPUDeviceMemoryLimit", **old), g["mem_total"])
                self.assertEqual(series(m, "GPUDeviceMemoryAllocated", **old), g["mem"])
                self.assertEqual(series(m, "GPUDeviceCoreLimit", **old), 100)
                self.assertEqual(series(m, "GPUDeviceCoreAllocated", **old), g["cores"])
                self.assertEqual(series(m, "GPUDeviceSharedNum", **old), g["tenants"])
                self.assertEqual(series(m, "hami_gpu_shared_count", node=g["node"],
                                        device_uuid=uuid), g["tenants"])
            self.assertEqual(series(m, "vGPUMemoryAllocated", podnamespace="default",
                                    podname="one"), 4000 * MIB)
            self.assertEqual(series(m, "vGPUCoreAllocated", podnamespace="default",
                                    podname="one"), 30)
        finally:
            c.stop()


class DomText(html.parser.HTMLParser):
    """Text by element id, and the attributes of every element, from a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.by_id, self.stack, self.elements = {}, [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        if tag in ("br", "meta", "input", "img", "link"):
            return
        self.stack.append([tag, a.get("id"), []])

    def handle_endtag(self, tag):
        while self.stack:
            t, ident, text = self.stack.pop()
            if ident:
                self.by_id[ident] = "".join(text).strip()
            if self.stack:
                self.stack[-1][2].extend(text)
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)


def fmt_bytes(n):  # the page's bytes()
    units, i = ["B", "KiB", "MiB", "GiB", "TiB"], 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    if i == 0:
        return "%d %s" % (n, units[i])
    return ("%.0f" if n >= 100 else "%.1f") % n + " " + units[i]


def fmt_pct(x):  # the page's pct()
    v = round(x * 1000) / 10
    return ("%d" % v if v == int(v) else "%s" % v) + "%"


def chromium(url, out_dir, screenshot=None):
    """The DOM of url once its script has run (virtual time lets the fetch finish)."""
    if not os.access(CHROMIUM, os.X_OK):
        missing(CHROMIUM + " (Debian package chromium)")
    profile = tempfile.mkdtemp(prefix="vgpu-chromium-")
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--user-data-dir=" + profile,
            "--virtual-time-budget=8000", "--window-size=1400,1500"]
    try:
        if screenshot:
            subprocess.run(args + ["--screenshot=" + screenshot, url], capture_output=True,
                           timeout=120, check=True)
        r = subprocess.run(args + ["--dump-dom", url], capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        with open(os.path.join(out_dir, "dashboard.html"), "wb") as f:
            f.write(r.stdout)
        return r.stdout.decode()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class PageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, cls.conn = start_cluster()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def test_page_shows_the_state(self):
        os.makedirs(OUT_DIR, exist_ok=True)
        shot = os.path.join(OUT_DIR, "dashboard.png")
        dom = chromium("http://127.0.0.1:%d/ui" % self.c.port, OUT_DIR, screenshot=shot)
        self.assertGreater(os.path.getsize(shot), 10000)
        p = DomText()
        p.feed(dom)
        ids = p.by_id
        self.assertIn("data-render-ms", dom, "the page never rendered the state:\n" + dom[-2000:])
        gpus, nodes, ctrs = expected(self.c)
        live = [u for n in ("node-a", "node-b", "node-c") for u in nodes[n]]
        mem = sum(gpus[u]["mem"] for u in live)
        mem_total = sum(gpus[u]["mem_total"] for u in live)
        alloc = sum(gpus[u]["cores"] / 100 for u in live)
        stranded = sum(gpus[u]["stranded"] for u in live)
        self.assertEqual(ids["c-nodes"], "3")
        self.assertEqual(ids["c-gpus"], str(len(live)))
        self.assertEqual(ids["c-mem"], fmt_bytes(mem) + " / " + fmt_bytes(mem_total))
        self.assertEqual(ids["c-compute"], "%g / %g" % (round(alloc, 2), len(live)))
        self.assertEqual(ids["c-stranded"], "%g" % round(stranded, 2))
        self.assertEqual(ids["c-frag"], fmt_pct(stranded / (len(live) - alloc)))
        self.assertEqual(ids["c-containers"], str(len(ctrs)))
        self.assertEqual(ids["c-pods"], "%d / 0 / 2" % len(PODS))
        for uuid, g in gpus.items():
            key = "%s-%d" % (g["node"], g["index"])
            self.assertEqual(ids["g-mem-" + key],
                             fmt_bytes(g["mem"]) + " / " + fmt_bytes(g["mem_total"]))
            self.assertEqual(ids["g-cpu-" + key], fmt_pct(g["cores"] / 100))
            self.assertEqual(ids["g-ctr-" + key], "%d / %d" % (g["tenants"], g["slots"]))
            self.assertEqual(ids["g-str-" + key], fmt_pct(g["stranded"]))
        # One container row per share, under its pod's name.
        rows = [a.get("data-pod") for t, a in p.elements if t == "tr" and
                "ctr" in (a.get("class") or "")]
        self.assertEqual(sorted(rows), sorted("%s/%s" % (c[0], c[1]) for c in ctrs))
        # The heat strip: one square per GPU, the unhealthy one and the partly used ones
        # marked.
        squares = [a.get("class") for t, a in p.elements if t == "b" and "title" in a]
        self.assertEqual(len(squares), len(gpus))
        self.assertEqual(squares.count("bad"), 1)
        self.assertEqual(squares.count("part"),
                         sum(1 for g in gpus.values() if g["stranded"] > 0 and g["healthy"]))
        # Pending pods, with the reason of the last filter.
        self.assertIn("default/huge", dom)
        self.assertIn("no GPU with enough free memory, compute and slots", dom)
        self.assertIn("default/later", dom)
        self.assertIn("not filtered yet", dom)


    def test_held_time_shown(self):
        """The time a container was held behind high priority, as its node's inventory
        reports it (`held`, display only), is in state.json under that container and GPU
        and on the page beside it ("held N s"); no other container shows one."""
        pods = sorted((p for p in self.c.list("pods") if p["spec"].get("nodeName") and
                       p["metadata"].get("annotations", {}).get("vgpu.io/decision")),
                      key=lambda p: p["metadata"]["name"])
        pod = pods[0]
        key = "%s/%s" % (pod["metadata"]["namespace"], pod["metadata"]["name"])
        node_name = pod["spec"]["nodeName"]
        ctr = json.loads(pod["metadata"]["annotations"]["vgpu.io/decision"])["containers"][0]
        uuid = ctr["gpus"][-1]["uuid"]
        status, node = self.c.apic.request("GET", "/api/v1/nodes/" + node_name)
        self.assertEqual(status, 200, node)
        old = node["metadata"]["annotations"]["vgpu.io/gpus"]
        inv = json.loads(old)
        gpu = [g["uuid"] for g in inv["gpus"]].index(uuid)
        inv["held"] = [{"pod": pod["metadata"]["uid"], "container": ctr["name"], "gpu": gpu,
                        "seconds": 4321}]

        def set_inventory(text):
            status, body = self.c.apic.request(
                "PATCH", "/api/v1/nodes/" + node_name,
                {"metadata": {"annotations": {"vgpu.io/gpus": text}}},
                ctype="application/merge-patch+json")
            self.assertEqual(status, 200, body)

        def held_in_state():
            st = self.c.ext.request("GET", "/ui/state.json")[1]
            return [(n["name"], g["uuid"], "%s/%s" % (t["namespace"], t["pod"]),
                     t["heldSeconds"])
                    for n in st["nodes"] for g in n["gpus"] for t in g["tenants"]
                    if "heldSeconds" in t]

        self.assertEqual(held_in_state(), [])
        set_inventory(json.dumps(inv))
        try:
            deadline = time.time() + 30
            while not held_in_state():
                self.assertLess(time.time(), deadline, "state.json never showed the held time")
                time.sleep(0.05)
            self.assertEqual(held_in_state(), [(node_name, uuid, key, 4321)])
            out = os.path.join(OUT_DIR, "held")
            os.makedirs(out, exist_ok=True)
            dom = chromium("http://127.0.0.1:%d/ui" % self.c.port, out)
            self.assertIn("data-render-ms", dom, "the page never rendered the state")
            rows = re.findall(r'<tr class="ctr" data-pod="([^"]*)">(.*?)</tr>', dom, re.S)
            shown = [(k, re.search(r"held (\d+) s", r).group(1)) for k, r in rows
                     if re.search(r"held (\d+) s", r)]
            self.assertEqual(shown, [(key, "4321")])
        finally:
            set_inventory(old)
            deadline = time.time() + 30
            while held_in_state() and time.time() < deadline:
                time.sleep(0.05)
        self.assertEqual(held_in_state(), [])

    def test_live_refresh(self):
        """The page follows the scheduler: a pod bound after the page loaded shows up at
        the next refresh (?refresh=1), without reloading."""
        if not os.access(CHROMIUM, os.X_OK):
            missing(CHROMIUM + " (Debian package chromium)")
        sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
        try:
            import dashboard_bench as B
        except SystemExit as exc:  # python3-websocket missing
            missing(str(exc))
        browser = B.Browser()
        try:
            browser.call("Page.enable")
            browser.load("http://127.0.0.1:%d/ui?refresh=1" % self.c.port)
            before = browser.evaluate("document.getElementById('c-containers').textContent")
            stamp = browser.evaluate("document.body.getAttribute('data-time')")
            pod = self.c.create_pod(H.pod_object("late", {"nvidia.com/gpu": "1",
                                                          "nvidia.com/gpumem": "1000",
                                                          "nvidia.com/gpucores": "10"}))
            got, body = self.c.filter(self.conn, pod, NAMES)
            self.assertEqual(self.c.bind(self.conn, pod, got[0]), "", body)
            deadline = time.time() + 30
            while True:
                now = browser.evaluate("document.getElementById('c-containers').textContent")
                if now == str(int(before) + 1):
                    break
                self.assertLess(time.time(), deadline, "the page never showed the new pod")
                time.sleep(0.1)
            self.assertNotEqual(browser.evaluate("document.body.getAttribute('data-time')"),
                                None)
            self.assertTrue(browser.evaluate(
                "!!document.querySelector('tr.ctr[data-pod=\"default/late\"]')"))
            self.assertIsNotNone(stamp)
        finally:
            browser.close()
            # Leave the cluster as the other test expects it.
            self.c.apic.request("DELETE", "/api/v1/namespaces/default/pods/late")
            deadline = time.time() + 20
            while self.c.ext.request("GET", "/ui/state.json")[1]["cluster"]["podsBound"] != \
                    len(PODS) and time.time() < deadline:
                time.sleep(0.05)


class ExplainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, cls.conn = start_cluster()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def test_explain(self):
        status, body = self.conn.request("GET", "/ui/explain?namespace=team-b&pod=pair")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["state"], "bound")
        pod = self.c.get_pod("pair", ns="team-b")
        self.assertEqual(body["node"], pod["spec"]["nodeName"])
        self.assertEqual(body["decision"], json.loads(pod["metadata"]["annotations"]
                                                      ["vgpu.io/decision"]))
        self.assertEqual(body["lastFilter"]["node"], body["node"])
        self.assertEqual(body["lastFilter"]["offered"], 3)
        # node-c's only GPU is unhealthy: it failed with the capacity reason.
        status, body = self.conn.request("GET", "/ui/explain?pod=huge")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["state"], "pending")
        self.assertIsNone(body["node"])
        f = body["lastFilter"]
        self.assertEqual((f["offered"], f["failed"]), (3, 3))
        self.assertEqual(f["reasons"], [{"reason": "vgpu: no GPU with enough free memory, "
                                         "compute and slots", "nodes": 3,
                                         "examples": NAMES}])
        status, body = self.conn.request("GET", "/ui/explain?pod=later")
        self.assertEqual(status, 200, body)
        self.assertEqual((body["state"], body["lastFilter"]), ("pending", None))
        # Filters naming pods the API does not hold keep nothing, whatever they ask
        # (a request nobody can serve is refused before the pending check).
        for i, limits in enumerate([{"nvidia.com/gpu": "1"},
                                    {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "500"}]):
            ghost = H.pod_object("ghost-%d" % i, limits)
            ghost["metadata"]["uid"] = "uid-ghost"
            self.c.filter(self.conn, ghost, NAMES)
            status, body = self.conn.request("GET", "/ui/explain?pod=ghost-%d" % i)
            self.assertEqual(status, 404, body)
        # The pod is deleted: nothing is kept of it.
        st, _ = self.c.apic.request("DELETE", "/api/v1/namespaces/default/pods/huge")
        self.assertIn(st, (200, 202))
        deadline = time.time() + 20
        while self.conn.request("GET", "/ui/explain?pod=huge")[0] != 404:
            self.assertLess(time.time(), deadline, "the verdict outlived its pod")
            time.sleep(0.05)
        status, body = self.conn.request("GET", "/ui/explain?pod=huge")
        self.assertIn("not known to the scheduler", body["Error"])


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, cls.conn = start_cluster()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def bad_requests(self):
        m = parse_metrics(self.conn.request("GET", "/metrics", raw=True)[1].decode())
        return series(m, "vgpu_scheduler_errors_total", kind="bad_request")

    def test_garbage_on_ui_paths(self):
        before = self.bad_requests()
        cases = [
            ("GET", "/ui/nope", None, 404, b"the dashboard serves /ui"),
            ("GET", "/ui/state.json/x", None, 404, b"the dashboard serves"),
            ("GET", "/ui/" + "a" * 5000, None, 404, b""),
            ("POST", "/ui", b"x", 405, b"GET only"),
            ("POST", "/ui/explain", b"{}", 405, b"GET only"),
            ("GET", "/ui/explain", None, 400, b"needs ?pod=NAME"),
            ("GET", "/ui/explain?pod=", None, 400, b"Kubernetes names"),
            ("GET", "/ui/explain?pod=../../etc/passwd", None, 400, b"Kubernetes names"),
            ("GET", "/ui/explain?pod=a&namespace=A%00b", None, 400, b"Kubernetes names"),
            ("GET", "/ui/explain?pod=" + "a" * 300, None, 400, b"Kubernetes names"),
            ("GET", "/ui/explain?pod=a&debug=1", None, 400, b"unknown parameter"),
            ("GET", "/ui/explain?pod", None, 400, b"needs ?pod=NAME"),
            ("GET", "/ui/explain?pod=nobody", None, 404, b"not known to the scheduler"),
        ]
        counted = 0
        for method, path, body, code, needle in cases:
            status, text = self.conn.request(method, path, body=body, raw=True)
            self.assertEqual(status, code, (method, path[:80], text[:300]))
            self.assertIn(needle, text, (method, path[:80]))
            counted += 1
        # A URI that does not parse names no route.
        status, text = self.conn.request("GET", "/ui/explain?%zz", raw=True)
        self.assertEqual((status, text), (404, b"not found\n"))
        # A method the server takes for no path at all: 501 Not Implemented.
        status, _ = self.conn.request("PUT", "/ui/state.json", body=b"{}", raw=True)
        self.assertEqual(status, 501)
        # Oversized: past the body ceiling the server refuses before any route runs.
        import socket
        s = socket.create_connection(("127.0.0.1", self.c.port), timeout=10)
        s.sendall(b"POST /ui/state.json HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % (17 << 20) + b"x" * 65536)
        answer = s.recv(4096)
        s.close()
        self.assertTrue(answer.startswith(b"HTTP/1.1 413"), answer[:200])
        # Raw garbage on the socket: the connection is dropped, the server keeps going.
        s = socket.create_connection(("127.0.0.1", self.c.port), timeout=10)
        s.sendall(b"\x00\xff GARBAGE /ui \r\n\r\n")
        try:
            s.recv(4096)
        except OSError:
            pass
        s.close()
        self.assertEqual(self.conn.request("GET", "/healthz")[0], 200)
        status, state = self.conn.request("GET", "/ui/state.json")
        self.assertEqual(status, 200)
        self.assertEqual(state["cluster"]["podsBound"], len(PODS))
        self.assertEqual(self.bad_requests() - before, counted)


def main():
    global BINARY, OUT_DIR
    BINARY, OUT_DIR = sys.argv[1], sys.argv[2]
    vg_skip.main(argv=[sys.argv[0]] + sys.argv[3:])


if __name__ == "__main__":
    main()
