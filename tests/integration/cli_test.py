#!/usr/bin/env python3
"""The vgpu command against the test API server and a fakegpu node.

usage: cli_test.py BUILD_DIR [unittest args]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scheduler_harness as H  # noqa: E402

BUILD = None


def vgpu():
    return os.path.join(BUILD, "bin", "vgpu")


def run(args, env=None, check=None, prog=None):
    p = subprocess.run([prog or vgpu()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60, env=env)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout, p.stderr)
    return p


class Api:
    """tests/kube_api_server.py with a fixture."""

    def __init__(self, nodes, pods):
        self.dir = tempfile.mkdtemp(prefix="vgpu-cli-")
        fixture = os.path.join(self.dir, "fixture.json")
        with open(fixture, "w") as f:
            json.dump({"nodes": nodes, "pods": pods}, f)
        port_file = os.path.join(self.dir, "port")
        self.proc = subprocess.Popen(["/usr/bin/python3", H.API_SERVER, "--port", "0",
                                      "--port-file", port_file, "--fixture", fixture],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = H.wait_port_file(port_file, self.proc, timeout=120)
        self.http = H.Http(self.port)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("current-context: c\n"
                    "contexts: [{name: c, context: {cluster: k, user: u, namespace: team}}]\n"
                    "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:%d'}}]\n"
                    "users: [{name: u, user: {token: test}}]\n" % self.port)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def decision(node, uuid, mem, cores, age=60):
    return json.dumps({"version": 1, "node": node, "time": int(time.time()) - age,
                       "containers": [{"name": "main", "gpus": [
                           {"uuid": uuid, "memoryMiB": mem, "cores": cores}]}]})


def bound_pod(name, node, uuid, mem, cores, ns="team", extra=None):
    pod = H.pod_object(name, dict({"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem),
                                   "nvidia.com/gpucores": str(cores)}, **(extra or {})),
                       annotations={"vgpu.io/decision": decision(node, uuid, mem, cores)}, ns=ns)
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    pod["metadata"]["uid"] = "uid-" + name
    return pod


def pending_pod(name, limits, ns="team"):
    pod = H.pod_object(name, limits, ns=ns)
    pod["metadata"]["uid"] = "uid-" + name
    return pod


def volcano_pod(name, ids, node="node-b"):
    """A pod Volcano placed (docs/volcano.md): a GPU container, one without, another GPU
    container (Volcano's gpu-pod12 example, one card each), its decision in
    volcano.sh/vgpu-ids-new, one segment per GPU container."""
    pod = H.pod_object(name, {}, annotations={
        "volcano.sh/vgpu-ids-new": ids, "volcano.sh/devices-to-allocate": "",
        "volcano.sh/bind-phase": "success", "volcano.sh/vgpu-node": node}, ns="vol")
    pod["spec"]["schedulerName"] = "volcano"
    pod["spec"]["containers"] = [
        {"name": "ubuntu-container", "image": "ubuntu",
         "resources": {"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2000"}}},
        {"name": "ubuntu-container0", "image": "ubuntu"},
        {"name": "ubuntu-container1", "image": "ubuntu",
         "resources": {"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000",
                                  "volcano.sh/vgpu-cores": "30"}}}]
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    pod["metadata"]["uid"] = "uid-" + name
    return pod


class ClusterTest(unittest.TestCase):
    """nodes, gpus, pods, explain and sim."""

    @classmethod
    def setUpClass(cls):
        nodes = [H.node_object("node-a", 2), H.node_object("node-b", 1, mem_mib=8000)]
        nodes[0]["status"]["allocatable"].update({"cpu": "64", "memory": "256Gi"})
        nodes[1]["status"]["allocatable"].update({"cpu": "32000m", "memory": "131072Mi"})
        bad = H.node_object("node-bad", 1)
        bad["metadata"]["annotations"]["vgpu.io/gpus"] = "{garbage"
        nodes.append(bad)
        # Both high priority on one GPU (placed so by hand: two high pods share one)
        high = {"nvidia.com/priority": "0"}
        pods = [bound_pod("train-0", "node-a", "GPU-node-a-0", 4096, 30, extra=high),
                bound_pod("train-1", "node-a", "GPU-node-a-0", 2048, 20, extra=high),
                pending_pod("big", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}),
                pending_pod("small", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
                                      "nvidia.com/gpucores": "10"}),
                pending_pod("elsewhere", {"nvidia.com/gpu": "1"}, ns="other"),
                pending_pod("web", {"cpu": "1"})]
        pods[-1]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m",
                                                                      "memory": "1Gi"}
        pods += [volcano_pod("gpu-pod12", "GPU-node-b-0,NVIDIA,2000,0:;GPU-node-b-0,NVIDIA,3000,30:"),
                 volcano_pod("torn", "GPU-node-b-0,NVIDIA,2000,0;GPU-node-b-0,NVIDIA,3000,30:")]
        cls.api = Api(nodes, pods)
        msg = ("0/3 nodes are available: 2 vgpu: no GPU with enough free memory, compute and "
               "slots, 1 vgpu: node has no valid vgpu.io/gpus inventory. preemption: 0/3 nodes "
               "are available: 3 Preemption is not helpful for scheduling.")
        status, _ = cls.api.http.request("POST", "/api/v1/namespaces/team/events", {
            "metadata": {"name": "big.1", "namespace": "team"},
            "involvedObject": {"kind": "Pod", "name": "big", "namespace": "team",
                               "uid": "uid-big"},
            "reason": "FailedScheduling", "message": msg, "count": 4, "type": "Warning",
            "lastTimestamp": "2026-11-26T02:00:00Z"})
        assert status == 201, status
        cls.kc = ["--kubeconfig", cls.api.kubeconfig]

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def test_nodes_table(self):
        out = run(["nodes"] + self.kc, check=0).stdout.splitlines()
        self.assertEqual(out[0].split(), ["NODE", "GPUS", "HEALTHY", "FREE", "MEMORY", "COMPUTE",
                                          "PODS", "HEARTBEAT"])
        a = next(line.split() for line in out if line.startswith("node-a "))
        # two GPUs of 16000 MiB; 4096 + 2048 MiB and 30 + 20 % allocated on GPU 0
        self.assertEqual(a[1:7], ["2", "2", "1", "6Gi/31.3Gi", "50%/200%", "2"])
        bad = next(line for line in out if line.startswith("node-bad"))
        self.assertIn("invalid inventory", bad)

    def test_nodes_wide_shows_stranded(self):
        out = run(["nodes", "-o", "wide"] + self.kc, check=0).stdout
        a = next(line.split() for line in out.splitlines() if line.startswith("node-a "))
        # GPU 0 is partly used: 16000 - 6144 MiB and 50 % of its compute are stranded on it
        self.assertEqual(a[-1], "9.6Gi+50%")

    def test_nodes_json(self):
        doc = json.loads(run(["nodes", "-o", "json"] + self.kc, check=0).stdout)
        nodes = {n["name"]: n for n in doc["nodes"]}
        g0 = nodes["node-a"]["gpus"][0]
        self.assertEqual((g0["memoryAllocatedMiB"], g0["coresAllocated"], g0["tenants"]),
                         (6144, 50, 2))
        self.assertIn("error", nodes["node-bad"])

    def test_gpus(self):
        out = run(["gpus", "--kubeconfig=" + self.api.kubeconfig], check=0).stdout.splitlines()
        rows = [line.split() for line in out[1:]]
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows[0][:2], ["node-a", "0"])
        self.assertIn("2/4", rows[0])

    def test_pods_namespace_from_context(self):
        out = run(["pods"] + self.kc, check=0).stdout
        self.assertIn("train-0", out)
        self.assertNotIn("elsewhere", out)  # another namespace
        self.assertNotIn("web", out)  # no GPUs
        big = next(line.split() for line in out.splitlines() if line.startswith("big "))
        self.assertEqual(big[1:3], ["Pending", "<pending>"])

    def test_pods_all_namespaces_wide(self):
        out = run(["pods", "-A", "-o", "wide"] + self.kc, check=0).stdout
        self.assertIn("elsewhere", out)
        row = next(line.split() for line in out.splitlines() if "train-0" in line)
        self.assertEqual(row[0], "team")
        self.assertEqual(row[-1], "main=0:4Gi/30%")

    def test_pods_placed_by_volcano(self):
        """A Volcano pod shows the GPUs of its volcano.sh/vgpu-ids-new, each segment on the
        container that asked (the one without GPUs between them gets none); a decision that
        does not read as Volcano writes it (a device without its ':') is no decision."""
        out = run(["-n", "vol", "pods", "-o", "wide"] + self.kc, check=0).stdout
        row = next(line.split("  ") for line in out.splitlines() if line.startswith("gpu-pod12 "))
        cells = [c.strip() for c in row if c.strip()]
        self.assertEqual(cells[1:4], ["Running", "node-b", "2"])
        self.assertEqual(cells[5], "30%")
        alloc = cells[-1].split(",")
        self.assertEqual([a.split("=")[0] for a in alloc], ["ubuntu-container", "ubuntu-container1"])
        self.assertTrue(alloc[0].endswith("/0%") and alloc[1].endswith("/30%"), alloc)
        torn = next(line for line in out.splitlines() if line.startswith("torn "))
        self.assertIn("(no vgpu decision)", torn)
        doc = json.loads(run(["-n", "vol", "pods", "-o", "json"] + self.kc, check=0).stdout)
        d = next(p for p in doc["pods"] if p["name"] == "gpu-pod12")["decision"]
        self.assertEqual(json.dumps(d["containers"], sort_keys=True).count("GPU-node-b-0"), 2)
        self.assertIn("3000", json.dumps(d))

    def test_pods_n(self):
        out = run(["-n", "other", "pods"] + self.kc, check=0).stdout
        self.assertIn("elsewhere", out)
        self.assertNotIn("train-0", out)

    def test_explain_bound(self):
        out = run(["explain", "train-0"] + self.kc, check=0).stdout
        self.assertIn("runs on node node-a", out)
        self.assertIn("GPU 0 (GPU-node-a-0): 4Gi", out)
        self.assertIn("30% of its compute", out)
        self.assertIn("binpack", out)
        self.assertIn("container main: task priority 0 (high; nvidia.com/priority)", out)
        self.assertIn("high priority: it shares this GPU with another high-priority container",
                      out)

    def test_explain_pending_reasons_per_node(self):
        out = run(["explain", "big"] + self.kc, check=0).stdout
        self.assertIn("No node can take it now", out)
        lines = out.splitlines()
        a = next(line for line in lines if line.startswith("node-a "))
        self.assertIn("no GPU with enough free memory, compute and slots", a)
        self.assertIn("GPU 1 has the most free memory: 15.6Gi", a)
        bad = next(line for line in lines if line.startswith("node-bad "))
        self.assertIn("no valid vgpu.io/gpus inventory", bad)
        # kube-scheduler's event, split into its reasons
        self.assertIn("0 of 3 nodes were available", out)
        self.assertIn("2 nodes: vgpu: no GPU with enough free memory", out)
        self.assertIn("1 node: vgpu: node has no valid", out)

    def test_explain_pending_that_fits(self):
        doc = json.loads(run(["explain", "small", "-o", "json"] + self.kc, check=0).stdout)
        nodes = {n["name"]: n for n in doc["nodes"]}
        self.assertTrue(nodes["node-a"]["chosen"])  # binpack: the most allocated node
        self.assertTrue(nodes["node-b"]["fits"])
        self.assertFalse(nodes["node-b"]["chosen"])
        self.assertFalse(nodes["node-bad"]["fits"])

    def test_explain_event_with_control_bytes(self):
        """Anyone who may create Events can write the message explain prints: its control
        bytes reach the terminal as '?'."""
        status, _ = self.api.http.request("POST", "/api/v1/namespaces/team/events", {
            "metadata": {"name": "small.1", "namespace": "team"},
            "involvedObject": {"kind": "Pod", "name": "small", "namespace": "team"},
            "reason": "FailedScheduling", "count": 1, "lastTimestamp": "2026-11-26T01:00:00Z",
            "message": "0/3 nodes are available: 3 \x1b]0;pwned\x07\x1b[2Jgone."})
        self.assertEqual(status, 201)
        out = run(["explain", "small"] + self.kc, check=0).stdout
        self.assertNotIn("\x1b", out)
        self.assertNotIn("\x07", out)
        self.assertIn("3 nodes: ?]0;pwned??[2Jgone", out)

    def test_explain_unknown_pod(self):
        p = run(["explain", "no-such-pod"] + self.kc, check=1)
        self.assertIn('pod "no-such-pod" not found in namespace "team"', p.stderr)
        self.assertEqual(p.stdout, "")

    def test_explain_needs_a_name(self):
        p = run(["explain"] + self.kc, check=1)
        self.assertIn("missing the pod's name", p.stderr)

    def test_sim_exports_and_runs(self):
        out = os.path.join(self.api.dir, "sim")
        report = os.path.join(self.api.dir, "report.html")
        p = run(["sim", "--out", out, "--seeds", "42", "--policy", "default,binpack",
                 "--report", report] + self.kc, check=0)
        with open(os.path.join(out, "nodes.csv")) as f:
            nodes = f.read().splitlines()
        self.assertEqual(nodes[0], "sn,cpu_milli,memory_mib,gpu,model")
        self.assertIn("node-a,64000,262144,2,NVIDIA H100 80GB HBM3", nodes)
        self.assertIn("node-b,32000,131072,1,NVIDIA H100 80GB HBM3", nodes)
        self.assertEqual(len(nodes), 3)  # node-bad has no usable inventory
        with open(os.path.join(out, "pods.csv")) as f:
            pods = f.read().splitlines()
        self.assertIn("team/train-0,0,0,1,300,", pods)  # 30 % of a GPU
        self.assertIn("team/web,500,1024,0,0,", pods)
        self.assertIn("binpack", p.stdout)
        with open(report) as f:
            self.assertIn("<svg", f.read())

    def test_as_kubectl_plugin(self):
        link = os.path.join(self.api.dir, "kubectl-vgpu")
        if not os.path.exists(link):
            os.symlink(vgpu(), link)
        p = run(["nodes", "--bogus"] + self.kc, check=1, prog=link)
        self.assertIn("See 'kubectl vgpu nodes --help'", p.stderr)
        self.assertTrue(os.path.islink(os.path.join(BUILD, "bin", "kubectl-vgpu")))

    def test_unreachable_api_server(self):
        p = run(["nodes", "--server", "http://127.0.0.1:1"], check=1)
        self.assertIn("error: the API server at http://127.0.0.1:1", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_bad_flags(self):
        for args, msg in ((["nodes", "--bogus"], "unknown flag: --bogus"),
                          (["frobnicate"], 'unknown command "frobnicate"'),
                          (["nodes", "-o", "yaml"], "expected wide or json"),
                          (["nodes", "--once"], "unknown flag: --once"),
                          (["top", "--interval", "0.01"], "0.1 to 3600 seconds"),
                          (["top", "--interval", "abc"], "--interval 'abc'"),
                          (["pods", "-n"], "flag needs an argument"),
                          (["nodes", "extra"], 'unexpected argument "extra"'),
                          (["nodes", "--server", "ftp://x"], "http:// or https://")):
            p = run(args, check=1)
            self.assertIn(msg, p.stderr, args)

    def test_help_on_every_verb(self):
        for verb in ("top", "nodes", "gpus", "pods", "explain", "sim"):
            p = run([verb, "--help"], check=0)
            self.assertIn("Usage:", p.stdout)
            self.assertIn(verb, p.stdout)
        self.assertIn("explain", run(["--help"], check=0).stdout)


def terminal_missing(tmux=False):
    """What a terminal test lacks here, or None: a pseudo-terminal (a chroot whose
    /dev/pts is not mounted has none), and tmux for the live view."""
    if tmux and shutil.which("tmux") is None:
        return "tmux (Debian package tmux)"
    try:
        a, b = os.openpty()
    except OSError as exc:
        return "a pseudo-terminal (%s; is /dev/pts mounted?)" % exc
    os.close(a)
    os.close(b)
    return None


def need_terminal(tmux=False):
    """Exits through vg_skip (77 locally, a failure under CI, tests/lib/README.md) when the
    terminal tests cannot run: called before unittest starts, for the classes that need it
    (CTest runs each class on its own)."""
    what = terminal_missing(tmux)
    if what is not None:
        sys.path.insert(0, os.path.join(H.ROOT, "tests", "lib"))
        import vg_skip
        vg_skip.skip(what)


class SimProgressTest(unittest.TestCase):
    """vgpu-sim shows progress on a terminal (script(1) gives it one), never in a pipe."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-simp-")
        self.nodes = os.path.join(self.dir, "nodes.csv")
        self.pods = os.path.join(self.dir, "pods.csv")
        with open(self.nodes, "w") as f:
            f.write("sn,cpu_milli,memory_mib,gpu,model\n")
            for i in range(4):
                f.write("n%d,64000,262144,2,A100\n" % i)
        with open(self.pods, "w") as f:
            f.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n")
            for i in range(20):
                f.write("p%02d,1000,1024,1,%d,\n" % (i, 100 + 50 * (i % 10)))
        self.cmd = [os.path.join(BUILD, "bin", "vgpu-sim"), "--nodes", self.nodes, "--pods",
                    self.pods, "--policy", "all", "--seeds", "42-51", "--jobs", "1"]

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_progress_on_a_terminal(self):
        p = subprocess.run(["script", "-qec", " ".join(self.cmd), "/dev/null"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("vgpu-sim: 70/70 runs (100 %)", p.stdout)
        self.assertIn("\033[Kvgpu-sim: 1/70 runs", p.stdout)  # each line replaces the last
        self.assertIn("fgd ", p.stdout)  # then the table

    def test_no_progress_in_a_pipe(self):
        p = subprocess.run(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("runs (", p.stderr + p.stdout)


def fakegpu_env(state):
    env = dict(os.environ)
    env["FAKEGPU_DEVICES"] = ",".join(["NVIDIA H100 80GB HBM3:81559MiB:132"] * 2)
    env["FAKEGPU_STATE_DIR"] = state
    return env


class TopBase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-top-")
        self.state = os.path.join(self.dir, "state")
        os.mkdir(self.state)
        self.ctrs = os.path.join(self.dir, "containers")
        os.mkdir(self.ctrs)
        self.env = fakegpu_env(self.state)
        self.nvml = ["--nvml-library", os.path.join(BUILD, "fakegpu", "libnvidia-ml.so.1"),
                     "--region-dir", self.ctrs]
        doc = json.loads(run(["top", "-o", "json"] + self.nvml, env=self.env, check=0).stdout)
        self.uuids = [g["uuid"] for g in doc["gpus"]]
        self.assertEqual(len(self.uuids), 2)
        subprocess.run([os.path.join(BUILD, "tests", "top_fixture"), self.ctrs, "3"] +
                       self.uuids, check=True)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class TopTest(TopBase):
    def test_once(self):
        out = run(["top", "--once"] + self.nvml, env=self.env, check=0).stdout
        lines = out.splitlines()
        self.assertIn("2 GPUs   6 containers", lines[0])
        gpu0 = next(line.split() for line in lines if line.startswith("0 "))
        self.assertEqual(gpu0[-1], "3")  # three containers on GPU 0
        row = next(line.split() for line in lines if " job-2 " in line and line.startswith("1"))
        # GPU 1, team-1/job-2: 3 GiB of 4 GiB, 75 %, share 25 %, achieved 12 %, waited 2 s,
        # high priority, never held
        self.assertEqual(row, ["1", "team-1", "job-2", "main", "3Gi/4Gi", "75%", "25%", "12%",
                               "2.0s", "high", "0.0s"])
        # team-0/job-1: low priority, held 0.5 s; team-0/job-0: none named
        row = next(line.split() for line in lines if " job-1 " in line and line.startswith("0"))
        self.assertEqual(row[-3:], ["1.0s", "low", "0.5s"])
        row = next(line.split() for line in lines if " job-0 " in line and line.startswith("0"))
        self.assertEqual(row[-2:], ["-", "0.0s"])

    def test_json(self):
        doc = json.loads(run(["top", "-o", "json"] + self.nvml, env=self.env, check=0).stdout)
        self.assertEqual(doc["errors"], 0)
        c = doc["gpus"][0]["containers"][1]
        self.assertEqual((c["namespace"], c["pod"], c["container"]), ("team-0", "job-1", "main"))
        self.assertEqual(c["memoryUsedBytes"], 2 << 30)
        self.assertEqual(c["memoryLimitBytes"], 4 << 30)
        self.assertEqual(c["computeLimitPercent"], 25)
        self.assertAlmostEqual(c["computeAchievedRatio"], 0.11)
        self.assertEqual((c["priority"], c["heldSeconds"]), (1, 0.5))
        self.assertIsNone(doc["gpus"][0]["containers"][0]["priority"])

    def test_resized_limits_shown(self):
        """A live resize renames a new limits file in: the next refresh shows it."""
        p = subprocess.Popen([vgpu(), "top", "-o", "json", "--iterations", "2", "--interval",
                              "1.5"] + self.nvml, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        name = sorted(os.listdir(self.ctrs))[1]
        path = os.path.join(self.ctrs, name, "limits")
        with open(path) as f:
            text = f.read()
        with open(path + ".new", "w") as f:
            f.write(text.replace("CUDA_DEVICE_MEMORY_LIMIT_0=4096m", "CUDA_DEVICE_MEMORY_LIMIT_0=8192m")
                    .replace("CUDA_DEVICE_MEMORY_LIMIT_0=4g", "CUDA_DEVICE_MEMORY_LIMIT_0=8g"))
        os.rename(path + ".new", path)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        dec, docs, i = json.JSONDecoder(), [], 0
        while i < len(out):
            if out[i].isspace():
                i += 1
                continue
            doc, i = dec.raw_decode(out, i)
            docs.append(doc)
        self.assertEqual(len(docs), 2, out)

        def limit(doc):
            return [c["memoryLimitBytes"] for g in doc["gpus"] for c in g["containers"]
                    if c["pod"] == "job-1" and c["namespace"] == "team-0"][0]
        self.assertEqual(limit(docs[0]), 4 << 30)
        self.assertEqual(limit(docs[1]), 8 << 30, text)

    def test_missing_directory(self):
        p = run(["top", "--once", "--nvml-library",
                 os.path.join(BUILD, "fakegpu", "libnvidia-ml.so.1"),
                 "--region-dir", os.path.join(self.dir, "nope")], env=self.env, check=1)
        self.assertIn("cannot read", p.stderr)

    def test_no_nvml(self):
        # --containers-dir: the documented alias of --region-dir still works.
        p = run(["top", "--once", "--nvml-library", "/nonexistent/libnvidia-ml.so.1",
                 "--containers-dir", self.ctrs], env=self.env, check=1)
        self.assertIn("NVML: cannot load", p.stderr)
        self.assertIn("job-0", p.stdout)  # the containers are still shown

    def test_departed_container(self):
        shutil.rmtree(os.path.join(self.ctrs, sorted(os.listdir(self.ctrs))[0]))
        out = run(["top", "--once"] + self.nvml, env=self.env, check=0).stdout
        self.assertIn("5 containers", out)


class TopHostileTest(TopBase):
    """A tenant's region is its own to write: what top makes of a hostile one."""

    def test_corrupted_region(self):
        victim = sorted(os.listdir(self.ctrs))[0]
        path = os.path.join(self.ctrs, victim, "region")
        with open(path, "r+b") as f:
            f.write(b"garbage!")  # the magic
        p = run(["top", "--once"] + self.nvml, env=self.env, check=1)
        self.assertIn("error: container %s: bad region: " % victim, p.stderr)
        self.assertIn("not a vgpu region", p.stderr)
        # the others are still shown
        self.assertEqual(p.stdout.count(" main "), 6)

    def test_truncated_region_and_bad_limits(self):
        names = sorted(os.listdir(self.ctrs))
        os.truncate(os.path.join(self.ctrs, names[0], "region"), 4096)
        with open(os.path.join(self.ctrs, names[1], "limits"), "w") as f:
            f.write("vgpu-limits 9\n")
        p = run(["top", "--once"] + self.nvml, env=self.env, check=1)
        self.assertIn("error: container %s: bad region:" % names[0], p.stderr)
        self.assertIn("error: container %s: limits:" % names[1], p.stderr)

    def test_region_truncated_while_watched(self):
        """A tenant truncating its region while top watches it: the container is reported,
        the others keep being shown."""
        victim = sorted(os.listdir(self.ctrs))[2]
        p = subprocess.Popen([vgpu(), "top", "--iterations", "20", "--interval", "0.1"] +
                             self.nvml, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        os.truncate(os.path.join(self.ctrs, victim, "region"), 100)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("error: container %s: bad region" % victim, err)
        last = out.split("\n\n")[-1]
        self.assertEqual(last.count(" main "), 6)

    def watch_while(self, victim, forge, iterations=12):
        """top, live for iterations refreshes, while forge(path) rewrites the victim's
        region once top has read it: (exit status, stderr, the last frame's lines)."""
        path = os.path.join(self.ctrs, victim, "region")
        p = subprocess.Popen([vgpu(), "top", "--iterations", str(iterations), "--interval",
                              "0.1"] + self.nvml, env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        time.sleep(0.4)
        with open(path, "r+b") as f:  # offsets of docs/protocol.md
            forge(f)
        out, err = p.communicate(timeout=60)
        self.assertNotIn(b"\x1b", out)
        last = out.decode().split("\n\n")[-1].splitlines()
        self.assertEqual(len([line for line in last if " main " in line]), 6)
        other = next(line.split() for line in last if " job-1 " in line and line[0] == "0")
        self.assertEqual(other[4], "2Gi/4Gi")  # the other containers are unchanged
        return p.returncode, err.decode(), last

    def test_region_forged_while_watched(self):
        """A tenant rewrites its region after top first read it: a device count past the
        table, an unterminated UUID with control bytes, a counter at 2^63 - 1. Every read
        validates the header again: the region is bad, shown as such, nothing of it (no
        control byte) printed, and the other containers are unchanged."""
        def forge(f):
            f.seek(12)
            f.write(struct.pack("<I", 200))  # device_count
            f.seek(64)
            f.write(b"\x1b[2J" + b"A" * 60)  # uuid[64], no NUL
            f.seek(64 + 80)
            f.write(struct.pack("<Q", 2 ** 63 - 1))  # used
        victim = sorted(os.listdir(self.ctrs))[0]
        rc, err, last = self.watch_while(victim, forge)
        self.assertEqual(rc, 1, err)
        self.assertIn("error: container %s: bad region: " % victim, err)
        self.assertIn("region has 200 devices, expected 1..16", err)
        # its GPU is still the one its limits file names; no number of the region shows
        row = next(line for line in last if " job-0 " in line and line[0] == "0")
        self.assertEqual(row.split()[4:9], ["0/4Gi", "0%", "25%", "0%", "0.0s"])
        self.assertIn("bad region: ", row)

    def test_region_values_forged_while_watched(self):
        """A valid header with hostile values: a negative achieved share and throttled
        time read as 0, never as a huge unsigned number."""
        def forge(f):
            f.seek(64 + 88 + 3 * 8)
            f.write(struct.pack("<q", -5))  # waited_ns
            f.seek(64 + 88 + 9 * 8)
            f.write(struct.pack("<q", -10 ** 9))  # achieved_ppm
            f.seek(64 + 88 + 12 * 8)
            f.write(struct.pack("<q", -7))  # held_ns
        rc, err, last = self.watch_while(sorted(os.listdir(self.ctrs))[0], forge)
        self.assertEqual(rc, 0, err)
        row = next(line.split() for line in last if " job-0 " in line and line[0] == "0")
        self.assertEqual(row[-4:], ["0%", "0.0s", "-", "0.0s"])

    def test_region_truncated_between_check_and_read(self):
        """The region passes the size check (fstat), then shrinks to nothing before it is
        read (tests/integration/top_truncate_shim.c does it inside fstat): the read comes
        back short, top reports a bad region and carries on (nothing is mapped, so there is
        no SIGBUS to die of)."""
        victim = os.path.realpath(
            os.path.join(self.ctrs, sorted(os.listdir(self.ctrs))[1], "region"))
        env = dict(self.env)
        env["LD_PRELOAD"] = os.path.join(BUILD, "tests", "top_truncate_shim.so")
        env["TOP_SHIM_TRUNCATE"] = victim
        p = run(["top", "--iterations", "5", "--interval", "0.1"] + self.nvml, env=env)
        self.assertIn(p.returncode, (0, 1), p.stderr)  # not killed by a signal
        self.assertRegex(p.stdout, r"bad region: region \S+: region read 0 bytes of its "
                                   r"\d+-byte head")
        self.assertEqual(os.path.getsize(victim), 0)
        last = p.stdout.split("\n\n")[-1]
        self.assertEqual(last.count(" main "), 6)


class TopLiveTest(TopBase):
    """The live view in a real terminal: tmux runs it, the test reads the pane."""

    def tmux(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.socket] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, check=check, timeout=30)

    def pane(self):
        return self.tmux("capture-pane", "-p", "-t", "t").stdout

    def wait_for(self, pred, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.pane() if self.alive() else ""
            if pred(text):
                return text
            time.sleep(0.1)
        self.fail("%s; pane:\n%s" % (what, text))

    def alive(self):
        return self.tmux("has-session", "-t", "t", check=False).returncode == 0

    def test_live_refresh_and_quit(self):
        self.socket = "vgpu-top-%d" % os.getpid()
        done = os.path.join(self.dir, "done")
        cmd = " ".join([vgpu(), "top", "--interval", "0.2"] + self.nvml) + \
            "; echo exit=$? > " + done + "; sleep 30"
        env = " ".join("%s='%s'" % (k, self.env[k]) for k in ("FAKEGPU_DEVICES",
                                                               "FAKEGPU_STATE_DIR"))
        self.tmux("new-session", "-d", "-s", "t", "-x", "150", "-y", "40",
                  "env " + env + " sh -c '" + cmd.replace("'", "") + "'")
        try:
            text = self.wait_for(lambda t: "6 containers" in t and "(q quits)" in t,
                                 "the live view")
            self.assertIn("team-1", text)
            # a container that arrives shows up at the next refresh
            subprocess.run([os.path.join(BUILD, "tests", "top_fixture"),
                            os.path.join(self.ctrs), "4", self.uuids[0]], check=True)
            self.wait_for(lambda t: "7 containers" in t, "the new container")
            self.tmux("send-keys", "-t", "t", "q")
            deadline = time.time() + 20
            while not os.path.exists(done) and time.time() < deadline:
                time.sleep(0.1)
            with open(done) as f:
                self.assertEqual(f.read().strip(), "exit=0")
            # the terminal is restored: the alternate screen is gone
            self.assertNotIn("(q quits)", self.pane())
        finally:
            self.tmux("kill-server", check=False)


H100_PROFILES = [
    {"name": "1g.10gb", "id": 19, "memoryMiB": 9984, "sms": 16, "size": 1,
     "placements": [0, 1, 2, 3, 4, 5, 6]},
    {"name": "2g.20gb", "id": 14, "memoryMiB": 20096, "sms": 32, "size": 2, "placements": [0, 2, 4]},
    {"name": "3g.40gb", "id": 9, "memoryMiB": 40448, "sms": 60, "size": 4, "placements": [0, 4]},
    {"name": "7g.80gb", "id": 0, "memoryMiB": 81152, "sms": 132, "size": 8, "placements": [0]},
]


class MigTest(unittest.TestCase):
    """explain on a node in dynamic MIG mode: the instance a bound pod has, and why a pod no
    placement can take stays pending (docs/scheduler.md, "MIG on demand")."""

    @classmethod
    def setUpClass(cls):
        node = H.node_object("node-m", 1)
        node["metadata"]["annotations"]["vgpu.io/gpus"] = json.dumps({
            "version": 1, "heartbeat": int(time.time()), "mode": "vgpu",
            "gpus": [{"uuid": "GPU-m", "index": 0, "model": "NVIDIA H100 80GB HBM3",
                      "memoryMiB": 81559, "cores": 100, "slots": 7, "healthy": True,
                      "mig": {"slices": 8, "profiles": H100_PROFILES, "instances": [
                          {"profile": "3g.40gb", "start": 4, "size": 4, "pod": "uid-inf-0"}]}}]})
        dec = json.dumps({"version": 1, "node": "node-m", "time": int(time.time()) - 60,
                          "containers": [{"name": "main", "gpus": [
                              {"uuid": "GPU-m", "memoryMiB": 40448, "cores": 0,
                               "mig": {"profile": "3g.40gb", "start": 4}}]}]})
        bound = H.pod_object("inf-0", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"},
                             annotations={"vgpu.io/decision": dec}, ns="team")
        bound["spec"]["nodeName"] = "node-m"
        bound["status"]["phase"] = "Running"
        bound["metadata"]["uid"] = "uid-inf-0"
        pods = [bound,
                pending_pod("half", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40000"}),
                pending_pod("whole", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "60000"}),
                pending_pod("huge", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "90000"})]
        cls.api = Api([node], pods)
        cls.kc = ["--kubeconfig", cls.api.kubeconfig]

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()

    def test_explain_bound_names_the_instance(self):
        out = run(["explain", "inf-0"] + self.kc, check=0).stdout
        self.assertIn("runs on node node-m", out)
        self.assertIn("in its own MIG instance 3g.40gb at memory slice 4", out)
        doc = json.loads(run(["explain", "inf-0", "-o", "json"] + self.kc, check=0).stdout)
        self.assertEqual(doc["decision"]["containers"][0]["gpus"][0]["mig"],
                         {"profile": "3g.40gb", "start": 4})

    def test_explain_pending_that_fits_beside_the_instance(self):
        doc = json.loads(run(["explain", "half", "-o", "json"] + self.kc, check=0).stdout)
        self.assertTrue(doc["nodes"][0]["chosen"], doc)

    def test_explain_pending_reasons(self):
        out = run(["explain", "whole"] + self.kc, check=0).stdout
        self.assertIn("No node can take it now", out)
        line = next(x for x in out.splitlines() if x.startswith("node-m "))
        self.assertIn("every MIG placement that fits overlaps an existing instance", line)
        out = run(["explain", "huge"] + self.kc, check=0).stdout
        line = next(x for x in out.splitlines() if x.startswith("node-m "))
        self.assertIn("no MIG profile the GPUs allow has the memory and compute asked", line)


if __name__ == "__main__":
    BUILD = os.path.abspath(sys.argv.pop(1))
    if sys.argv[1:] in (["TopLiveTest"], ["SimProgressTest"]):
        need_terminal(tmux=sys.argv[1] == "TopLiveTest")
    unittest.main(verbosity=2)
