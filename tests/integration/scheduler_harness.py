"""Shared pieces of vgpu-scheduler's integration tests and benchmark (stdlib only).

Starts tests/kube_api_server.py with a generated cluster whose nodes carry the
vgpu.io/gpus inventory (docs/protocol.md), starts vgpu-scheduler against it, and replays
the extender calls exactly as kube-scheduler sends them (docs/interfaces.md):
POST /filter and /prioritize with ExtenderArgs, POST /bind with ExtenderBindingArgs.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_SERVER = os.path.join(ROOT, "tests", "kube_api_server.py")


def inventory(node, gpus, mem_mib=16000, slots=4, cores=100, heartbeat=None, healthy=True,
              model="NVIDIA H100 80GB HBM3"):
    return json.dumps({"version": 1, "heartbeat": int(heartbeat or time.time()), "mode": "vgpu",
                       "gpus": [{"uuid": "GPU-%s-%d" % (node, g), "index": g,
                                 "model": model, "memoryMiB": mem_mib,
                                 "cores": cores, "slots": slots, "numa": g // 4,
                                 "healthy": healthy} for g in range(gpus)]},
                      sort_keys=True, separators=(",", ":"))


def node_object(name, gpus, **kw):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"vgpu.io/gpus": inventory(name, gpus, **kw)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus * 10)}}}


def pod_object(name, limits, annotations=None, ns="default"):
    return {"metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
            "spec": {"schedulerName": "vgpu-scheduler",
                     "containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


class Http:
    """One keep-alive connection (kube-scheduler reuses connections too)."""

    def __init__(self, port, timeout=30):
        self.port, self.timeout = port, timeout
        self.conn = None

    def __del__(self):
        if self.conn is not None:
            self.conn.close()

    def request(self, method, path, body=None, ctype="application/json", raw=False):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                       timeout=self.timeout)
            try:
                data = body if isinstance(body, (bytes, type(None))) else \
                    json.dumps(body).encode()
                headers = {"Content-Type": ctype} if data is not None else {}
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                text = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                if raw:
                    return resp.status, text
                return resp.status, (json.loads(text) if text.strip().startswith((b"{", b"["))
                                     else text.decode(errors="replace"))
            except (ConnectionError, http.client.HTTPException, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def wait_for(pred, what, timeout=30):
    """Polls pred until it returns something true (returned); fails naming what after
    timeout seconds."""
    deadline = time.time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def wait_port_file(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("process exited with %s" % proc.returncode)
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no port in %s" % path)


def make_pki(directory, client_cn="kube-apiserver"):
    """Certificates for the webhook's TLS: the server's own (self-signed, tls.crt/tls.key),
    a client CA (client-ca.crt) and a client certificate it signed (client.crt/client.key,
    what kube-apiserver presents), and another CA's client certificate (rogue.crt/.key).
    Returns a dict of the paths."""
    p = {k: os.path.join(directory, f) for k, f in (
        ("cert", "tls.crt"), ("key", "tls.key"), ("ca", "client-ca.crt"),
        ("ca_key", "client-ca.key"), ("client", "client.crt"), ("client_key", "client.key"),
        ("rogue", "rogue.crt"), ("rogue_key", "rogue.key"))}

    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
        "/CN=vgpu-scheduler", "-keyout", p["key"], "-out", p["cert"])
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
        "/CN=webhook-client-ca", "-keyout", p["ca_key"], "-out", p["ca"])
    csr = os.path.join(directory, "client.csr")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + client_cn, "-keyout",
        p["client_key"], "-out", csr)
    run("x509", "-req", "-in", csr, "-CA", p["ca"], "-CAkey", p["ca_key"], "-CAcreateserial",
        "-days", "1", "-out", p["client"])
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
        "/CN=" + client_cn, "-keyout", p["rogue_key"], "-out", p["rogue"])
    return p


def namespace_object(name, phase="Active"):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
            "status": {"phase": phase}}


class Cluster:
    """The test API server plus one vgpu-scheduler."""

    # What vgpu-scheduler is started with before extra_args (base_args replaces it).
    BASE_ARGS = ("--listen", "127.0.0.1:0", "--debug-state")

    def __init__(self, binary, nodes, pods=(), ttl=30, extra_args=(), api_args=(),
                 base_args=BASE_ARGS, namespaces=None):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="vgpu-sched-")
        fixture = os.path.join(self.dir, "fixture.json")
        with open(fixture, "w") as f:
            doc = {"nodes": list(nodes), "pods": list(pods)}
            if namespaces is not None:  # the API server then checks namespaces exist
                doc["namespaces"] = [namespace_object(n) if isinstance(n, str) else n
                                     for n in namespaces]
            json.dump(doc, f)
        port_file = os.path.join(self.dir, "api.port")
        with open(os.path.join(self.dir, "api.log"), "w") as log:  # the child keeps its copy
            self.api = subprocess.Popen(["/usr/bin/python3", API_SERVER, "--port", "0",
                                         "--port-file", port_file, "--fixture", fixture,
                                         "--bookmark-interval", "1"] + list(api_args),
                                        stdout=log, stderr=subprocess.STDOUT)
        self.api_port = wait_port_file(port_file, self.api, timeout=120)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("current-context: c\n"
                    "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                    "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:%d'}}]\n"
                    "users: [{name: u, user: {token: test}}]\n" % self.api_port)
        self.ttl, self.extra_args, self.base_args = ttl, list(extra_args), list(base_args)
        self.sched = None
        self.apic = Http(self.api_port)
        self.start()

    def start(self):
        port_file = os.path.join(self.dir, "sched.port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        with open(os.path.join(self.dir, "sched.log"), "a") as log:
            self.sched = subprocess.Popen([self.binary] + self.base_args +
                                          ["--port-file", port_file, "--kubeconfig",
                                           self.kubeconfig, "--assume-ttl", str(self.ttl)] +
                                          self.extra_args, stdout=log, stderr=subprocess.STDOUT)
        self.port = wait_port_file(port_file, self.sched)
        self.ext = Http(self.port)
        self.started = time.time()

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.ext.request("GET", "/readyz")
            if status == 200:
                return time.time() - self.started
            time.sleep(0.02)
        raise AssertionError("scheduler never became ready")

    def kill9(self):
        self.sched.send_signal(signal.SIGKILL)
        self.sched.wait()

    def stop(self):
        for proc in (self.sched, self.api):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def log(self):
        with open(os.path.join(self.dir, "sched.log")) as f:
            return f.read()

    # ---- the API server ----
    def create_pod(self, pod):
        status, body = self.apic.request("POST", "/api/v1/namespaces/%s/pods"
                                         % pod["metadata"]["namespace"], pod)
        assert status == 201 or status == 200, (status, body)
        return body

    def get_pod(self, name, ns="default"):
        status, body = self.apic.request("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        assert status == 200, (status, body)
        return body

    def list(self, kind):
        status, body = self.apic.request("GET", "/api/v1/" + kind)
        assert status == 200, (status, body)
        return body["items"]

    # ---- kube-scheduler's side ----
    def filter(self, conn, pod, names, cache=True):
        if cache:
            args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        else:
            args = {"Pod": pod, "Nodes": {"kind": "NodeList", "apiVersion": "v1",
                                          "items": [{"metadata": {"name": n}} for n in names]},
                    "NodeNames": None}
        status, body = conn.request("POST", "/filter", args)
        assert status == 200, (status, body)
        if cache:
            return body.get("NodeNames") or [], body
        return [n["metadata"]["name"] for n in (body.get("Nodes") or {}).get("items") or []], body

    def prioritize(self, conn, pod, names):
        status, body = conn.request("POST", "/prioritize",
                                    {"Pod": pod, "Nodes": None, "NodeNames": names})
        assert status == 200, (status, body)
        return body

    def bind(self, conn, pod, node):
        meta = pod["metadata"]
        status, body = conn.request("POST", "/bind", {
            "PodName": meta["name"], "PodNamespace": meta["namespace"],
            "PodUID": meta.get("uid", ""), "Node": node})
        assert status == 200, (status, body)
        return body.get("Error", "")

    def sync_pods(self, timeout=30):
        """Returns once the scheduler has handled every pod event the API sent before the
        call: a marker pod created now (waiting for a node, asking for nothing) shows up
        in the scheduler's view, and one watch delivers its events in order."""
        self.markers = getattr(self, "markers", 0) + 1
        name = "sync-marker-%d" % self.markers
        self.create_pod(pod_object(name, {}))
        return wait_for(lambda: self.ext.request("GET", "/ui/explain?pod=" + name)[0] == 200,
                        "the scheduler to see pod " + name, timeout)

    def state(self, bound=False):
        status, body = self.ext.request("GET", "/debug/state-bound" if bound else "/debug/state")
        assert status == 200, (status, body)
        return body


def one_gpu_cluster(test, binary, node, **kw):
    """For a unittest case's setUp: test.cluster, a scheduler over node with one 16000 MiB
    GPU of 4 slots (kw: Cluster's options), ready; test.conn, a connection to it. It stops
    when the test ends, writing the end of its log first when VGPU_TEST_LOG is set."""
    test.cluster = Cluster(binary, [node_object(node, 1, mem_mib=16000, slots=4)], **kw)
    test.addCleanup(_stop_with_log, test.cluster)
    test.cluster.wait_ready()
    test.conn = Http(test.cluster.port)


def _stop_with_log(cluster):
    cluster.stop()
    if os.environ.get("VGPU_TEST_LOG"):
        sys.stderr.write(cluster.log()[-6000:])


def check_api_invariants(cluster):
    """Independent of the scheduler: sums every bound pod's decision annotation per GPU and
    compares with the node inventories in the API."""
    caps = {}
    for node in cluster.list("nodes"):
        text = node["metadata"].get("annotations", {}).get("vgpu.io/gpus")
        try:
            inv = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(inv, dict) or not isinstance(inv.get("gpus"), list):
            continue
        for g in inv["gpus"]:
            caps[g["uuid"]] = (g["memoryMiB"], g["cores"], g["slots"])
    used = {}
    for pod in cluster.list("pods"):
        text = pod["metadata"].get("annotations", {}).get("vgpu.io/decision")
        if not text:
            continue
        try:
            decision = json.loads(text)
        except ValueError:
            continue
        if not isinstance(decision, dict) or not isinstance(decision.get("containers"), list):
            continue
        for c in decision["containers"]:
            for g in c.get("gpus", []):
                u = used.setdefault(g["uuid"], [0, 0, 0])
                u[0] += g["memoryMiB"]
                u[1] += g["cores"]
                u[2] += 1
    for uuid, (mem, cores, n) in used.items():
        cap = caps.get(uuid)
        assert cap is not None, "decision names unknown GPU %s" % uuid
        assert mem <= cap[0], "%s memory %d > %d" % (uuid, mem, cap[0])
        assert cores <= cap[1], "%s cores %d > %d" % (uuid, cores, cap[1])
        assert n <= cap[2], "%s tenants %d > %d slots" % (uuid, n, cap[2])
    return used
