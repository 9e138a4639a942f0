#!/usr/bin/env python3
"""Round 2's attacks on vgpu-scheduler (docs/security.md, "Decisions, environment and the
DRA webhook"), each replayed against tests/kube_api_server.py and the scheduler driven
like kube-scheduler and kube-apiserver drive it.

usage: sched_attacks.py VGPU_SCHEDULER_BINARY CLASS

DecisionRemoval   a pod author strips vgpu.io/decision from their bound whole-GPU pod (a
                  PATCH straight to the API: no webhook); a second whole-GPU pod must not
                  be placed on the same GPU
DecisionRestart   the same, then vgpu-scheduler is killed (-9) and restarted: it must
                  rebuild the pod's charge from its own record (a ConfigMap in its
                  namespace), not the pod's annotation
WebhookRemoval    the UPDATE that removes or changes the annotation, as kube-apiserver
                  sends it for the author: refused; for vgpu's service account: allowed
EnvAll            pods setting NVIDIA_VISIBLE_DEVICES=all (env, valueFrom, envFrom, init
                  containers) without asking for a GPU, and on a GPU container
DraForgedReviews  a network peer without credentials posts 200 made-up AdmissionReviews
                  naming kube-system to the --webhook-dra port
DraBounds         reviews for a namespace that does not exist, and for more template
                  shapes than --dra-max-templates-per-namespace
DraSweep          templates no pod names are collected after the grace period

The figures each prints (FIGURE ...) are the ones docs/security.md quotes. Against a
binary from before the defences (no --webhook-client-ca, no records, no bounds) the DRA
cases start it with the flags it has, so that the replay measures the attack there.
"""
import base64
import copy
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "integration"))
import scheduler_harness as H  # noqa: E402

BINARY = None
NODE = "node-00"
GPU = "GPU-node-00-0"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates"
AUTHOR = {"username": "alice", "groups": ["team-a", "system:authenticated"]}
SCHEDULER_SA = {"username": "system:serviceaccount:vgpu-system:vgpu-scheduler"}


def figure(name, value):
    sys.stderr.write("FIGURE %s %s\n" % (name, value))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def binary_has(flag):
    r = subprocess.run([BINARY, "--help"], capture_output=True, text=True)
    return flag in r.stdout + r.stderr


def whole_gpu_pod(name):
    return H.pod_object(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000",
                               "nvidia.com/gpucores": "100"})


def apply_patch(doc, ops):
    """RFC 6902 add, replace and remove, as kube-apiserver applies the webhook's patch."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] == "add" and isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), op["value"])
        elif op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                parent[int(last)] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise AssertionError(op)
    return doc


def runtime_env(container, device_plugin_env=None, env_from_values=None):
    """NVIDIA_VISIBLE_DEVICES as the container runtime sees it: kubelet lists the device
    plugin's env first, then the container's (envFrom's keys, then env's entries, each
    later one of a name replacing the earlier), and the runtime keeps the last."""
    env = dict(device_plugin_env or {})
    env.update(env_from_values or {})
    for e in container.get("env", []):
        env[e["name"]] = e.get("value", "<valueFrom>")
    return env.get("NVIDIA_VISIBLE_DEVICES")


class Scheduling(unittest.TestCase):
    """One node with one 16000 MiB GPU; a bound whole-GPU pod, whose author then strips
    the decision from it."""

    def setUp(self):
        H.one_gpu_cluster(self, BINARY, NODE)

    def schedule(self, pod):
        names, _ = self.cluster.filter(self.conn, pod, [NODE])
        if not names:
            return None
        return self.cluster.bind(self.conn, pod, names[0])

    def faults(self, **kw):
        status, _ = self.cluster.apic.request("POST", "/admin/faults", kw)
        self.assertEqual(status, 200)

    def bind_first(self):
        first = self.cluster.create_pod(whole_gpu_pod("first"))
        names, _ = self.cluster.filter(self.conn, first, [NODE])
        self.assertEqual(names, [NODE])
        # The watch shows the binding after the bind's answer has arrived, as it does when
        # the API server is not in the same host's loopback: the order in which vgpu
        # learns of the bind must not decide what it charges.
        self.faults(watch_paused=True)
        self.assertEqual(self.cluster.bind(self.conn, first, NODE), "")
        self.faults(watch_paused=False)
        deadline = time.time() + 10
        while time.time() < deadline and self.cluster.state(bound=True)["nodes"][NODE][0][
                "tenants"] != 1:
            time.sleep(0.05)
        return self.cluster.get_pod("first")

    def strip_decision(self):
        status, body = self.cluster.apic.request(
            "PATCH", "/api/v1/namespaces/default/pods/first",
            {"metadata": {"annotations": {"vgpu.io/decision": None}}},
            ctype="application/merge-patch+json")
        self.assertEqual(status, 200, body)
        self.assertNotIn("vgpu.io/decision", body["metadata"].get("annotations", {}))
        time.sleep(1.0)  # the watch delivers the change

    def second_placed(self):
        """Filters a second whole-GPU pod, created after the strip: once the scheduler's
        watch shows it waiting, it has seen the strip too (a watch keeps the API's order),
        and filter's answer is the verdict. The node it was bound to, or None."""
        second = self.cluster.create_pod(whole_gpu_pod("second"))
        deadline = time.time() + 30
        while time.time() < deadline:
            names, body = self.cluster.filter(self.conn, second, [NODE])
            if names:
                self.cluster.bind(self.conn, second, names[0])
                return names[0]
            if "is not waiting for a node" not in (body.get("Error") or ""):
                return None  # seen, and no GPU fits
            time.sleep(0.1)
        raise AssertionError("the scheduler's watch never showed the second pod")

    def records(self):
        status, body = self.cluster.apic.request("GET", "/api/v1/namespaces/vgpu-system/"
                                                 "configmaps")
        self.assertEqual(status, 200, body)
        return {c["metadata"]["name"]: c for c in body["items"]}


class DecisionRemoval(Scheduling):
    def test_stripped_decision_keeps_its_gpu(self):
        self.bind_first()
        self.strip_decision()
        placed = self.second_placed()
        use = self.cluster.state(bound=True)["nodes"][NODE][0]
        figure("decision_removal.second_pod_placed", placed is not None)
        figure("decision_removal.whole_gpu_pods_on_the_gpu", 2 if placed else 1)
        self.assertIsNone(placed, "a second whole-GPU pod was bound beside the stripped one")
        self.assertEqual((use["tenants"], use["memUsedMiB"], use["coresUsed"]), (1, 16000, 100))
        # The charge goes with the pod, not before.
        status, _ = self.cluster.apic.request("DELETE", "/api/v1/namespaces/default/pods/first")
        self.assertEqual(status, 200)
        second = self.cluster.get_pod("second")
        deadline = time.time() + 10
        names = []
        while time.time() < deadline and not names:
            names, _ = self.cluster.filter(self.conn, second, [NODE])
            time.sleep(0.1)
        self.assertEqual(names, [NODE])


class DecisionRestart(Scheduling):
    def test_restart_rebuilds_from_the_record(self):
        first = self.bind_first()
        uid = first["metadata"]["uid"]
        name = "vgpu-decision-" + uid
        deadline = time.time() + 10
        while time.time() < deadline and name not in self.records():
            time.sleep(0.1)
        records = self.records()
        figure("decision_restart.record_written", name in records)
        self.assertIn(name, records, "no decision record in vgpu-system")
        rec = records[name]
        self.assertTrue(rec.get("immutable"))
        self.assertEqual(rec["data"]["uid"], uid)
        self.assertEqual(rec["data"]["pod"], "default/first")
        self.assertEqual(rec["data"]["decision"],
                         first["metadata"]["annotations"]["vgpu.io/decision"])
        self.strip_decision()
        self.cluster.kill9()
        self.cluster.start()
        self.cluster.wait_ready()
        self.conn = H.Http(self.cluster.port)
        use = self.cluster.state(bound=True)["nodes"][NODE][0]
        placed = self.second_placed()
        figure("decision_restart.tenants_after_restart", use["tenants"])
        figure("decision_restart.second_pod_placed", placed is not None)
        self.assertEqual((use["tenants"], use["memUsedMiB"]), (1, 16000))
        self.assertIsNone(placed, "after a restart a second whole-GPU pod was bound beside "
                                  "the stripped one")
        # The record goes with the pod.
        status, _ = self.cluster.apic.request("DELETE", "/api/v1/namespaces/default/pods/first")
        self.assertEqual(status, 200)
        deadline = time.time() + 10
        while time.time() < deadline and name in self.records():
            time.sleep(0.1)
        self.assertNotIn(name, self.records())


class Webhook(unittest.TestCase):
    """The webhook alone, reviews posted as kube-apiserver posts them."""
    EXTRA = ()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-attack-sched-")
        self.pki = H.make_pki(self.dir)
        self.wport = free_port()
        self.cluster = H.Cluster(BINARY, [H.node_object(NODE, 1)], extra_args=[
            "--webhook-listen", "127.0.0.1:%d" % self.wport, "--tls-cert", self.pki["cert"],
            "--tls-key", self.pki["key"]] + list(self.EXTRA))
        self.cluster.wait_ready()

    def tearDown(self):
        self.cluster.stop()

    def review(self, request):
        ctx = ssl.create_default_context(cafile=self.pki["cert"])
        ctx.check_hostname = False
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx, timeout=10)
        conn.request("POST", "/webhook", json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": request}), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        self.assertEqual(resp.status, 200, text)
        return json.loads(text)["response"]

    def create(self, pod):
        """The pod as admitted (patch applied), or None when refused; and the answer."""
        r = self.review({"uid": "u", "operation": "CREATE", "namespace": "default",
                         "object": pod, "userInfo": AUTHOR})
        if not r["allowed"]:
            return None, r
        ops = json.loads(base64.b64decode(r["patch"])) if "patch" in r else []
        return apply_patch(pod, ops), r


class WebhookRemoval(Webhook):
    def test_removal_refused_but_for_vgpu(self):
        bound = whole_gpu_pod("first")
        bound["spec"]["nodeName"] = NODE
        bound["metadata"]["annotations"]["vgpu.io/decision"] = '{"version":1}'
        stripped = copy.deepcopy(bound)
        del stripped["metadata"]["annotations"]["vgpu.io/decision"]
        changed = copy.deepcopy(bound)
        changed["metadata"]["annotations"]["vgpu.io/decision"] = '{"version":1,"node":"x"}'
        results = {}
        for what, new in (("remove", stripped), ("change", changed)):
            for who, user in (("author", AUTHOR), ("vgpu", SCHEDULER_SA), ("nobody", None)):
                req = {"uid": "u", "operation": "UPDATE", "namespace": "default",
                       "object": new, "oldObject": bound}
                if user is not None:
                    req["userInfo"] = user
                results[(what, who)] = self.review(req)
        figure("webhook_removal.author_remove_allowed", results[("remove", "author")]["allowed"])
        for what in ("remove", "change"):
            for who in ("author", "nobody"):
                r = results[(what, who)]
                self.assertFalse(r["allowed"], (what, who, r))
                self.assertIn("vgpu.io/decision", r["status"]["message"])
            self.assertTrue(results[(what, "vgpu")]["allowed"], what)
        self.assertIn("may not remove it", results[("remove", "author")]["status"]["message"])


class EnvAll(Webhook):
    def test_no_gpu_container_gets_void(self):
        cpu = H.pod_object("cpu", {"cpu": "1"})
        cpu["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                "value": "all"}]
        cpu["spec"]["containers"].append({
            "name": "from-field", "image": "x", "resources": {},
            "env": [{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES",
                                                   "valueFrom": {"configMapKeyRef": {
                                                       "name": "c", "key": "k"}}}]})
        cpu["spec"]["containers"].append({
            "name": "from-map", "image": "x",
            "envFrom": [{"configMapRef": {"name": "gpu-all"}}]})
        cpu["spec"]["containers"].append({
            "name": "zero-gpus", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "0"}},
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
        cpu["spec"]["initContainers"] = [{"name": "init", "image": "x", "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
        del cpu["spec"]["schedulerName"]
        out, r = self.create(cpu)
        self.assertIsNotNone(out, r)
        seen = [runtime_env(c, env_from_values={"NVIDIA_VISIBLE_DEVICES": "all"}
                            if c.get("envFrom") else None)
                for c in out["spec"]["containers"] + out["spec"]["initContainers"]]
        figure("env_all.no_gpu_containers_seeing", seen)
        self.assertEqual(seen, ["void"] * 5)
        # The env is otherwise as the author wrote it.
        self.assertEqual(out["spec"]["containers"][1]["env"][0], {"name": "A", "value": "1"})

    def test_gpu_container_cannot_choose_its_devices(self):
        for name in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES",
                     "NVIDIA_MIG_MONITOR_DEVICES"):
            pod = whole_gpu_pod("gpu")
            pod["spec"]["containers"][0]["env"] = [{"name": name, "value": "all"}]
            out, r = self.create(pod)
            self.assertIsNone(out, name)
            self.assertIn(name, r["status"]["message"])
            self.assertIn("device plugin's to set", r["status"]["message"])
        # What only narrows or selects among the GPUs given stays the author's.
        pod = whole_gpu_pod("gpu")
        pod["spec"]["containers"][0]["env"] = [
            {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
        out, r = self.create(pod)
        self.assertIsNotNone(out, r)
        self.assertEqual(out["spec"]["containers"][0]["env"], pod["spec"]["containers"][0]["env"])
        self.assertEqual(runtime_env(out["spec"]["containers"][0],
                                     {"NVIDIA_VISIBLE_DEVICES": GPU}), GPU)


class EnvOff(Webhook):
    EXTRA = ("--no-overwrite-env",)

    def test_overwrite_env_can_be_turned_off(self):
        cpu = H.pod_object("cpu", {"cpu": "1"})
        out, r = self.create(cpu)
        self.assertNotIn("patch", r)


class Dra(unittest.TestCase):
    """The webhook in DRA mode. kube-apiserver presents the client certificate the
    webhook's --webhook-client-ca signed; an attacker has none, or another CA's."""
    EXTRA = ()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-attack-dra-")
        self.pki = H.make_pki(self.dir)
        self.wport = free_port()
        self.defended = binary_has("--webhook-client-ca")
        args = ["--webhook-listen", "127.0.0.1:%d" % self.wport, "--tls-cert", self.pki["cert"],
                "--tls-key", self.pki["key"], "--webhook-dra"]
        if self.defended:
            args += ["--webhook-client-ca", self.pki["ca"]] + list(self.EXTRA)
        self.cluster = H.Cluster(BINARY, [H.node_object(NODE, 2)], extra_args=args,
                                 namespaces=["default", "team-a", "kube-system",
                                             "vgpu-system"])
        self.cluster.wait_ready()

    def tearDown(self):
        self.cluster.stop()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(self.cluster.log()[-6000:])

    def post(self, request, cert=None):
        """(status, response or text); status None when the TLS handshake failed."""
        ctx = ssl.create_default_context(cafile=self.pki["cert"])
        ctx.check_hostname = False
        if cert is not None:
            ctx.load_cert_chain(*cert)
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx, timeout=10)
        try:
            conn.request("POST", "/webhook", json.dumps({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": request}), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode()
        except (ssl.SSLError, ConnectionError, OSError):
            return None, None
        finally:
            conn.close()
        if resp.status == 200:
            return 200, json.loads(text)["response"]
        return resp.status, text

    def apiserver(self):
        return (self.pki["client"], self.pki["client_key"])

    @staticmethod
    def gpu_review(i, ns, mib=None):
        pod = H.pod_object("ghost-%d" % i, {"nvidia.com/gpu": "1",
                                            "nvidia.com/gpumem": str(mib or 1000 + i)}, ns=ns)
        del pod["spec"]["schedulerName"]
        return {"uid": "u-%d" % i, "operation": "CREATE", "namespace": ns, "object": pod}

    def templates(self, ns):
        status, body = self.cluster.apic.request("GET", TEMPLATES % ns)
        self.assertEqual(status, 200, body)
        return {t["metadata"]["name"]: t for t in body["items"]}


class DraForgedReviews(Dra):
    def test_made_up_reviews_create_nothing(self):
        allowed = 0
        statuses = {}
        t0 = time.time()
        for i in range(200):
            cert = None if i % 2 == 0 else (self.pki["rogue"], self.pki["rogue_key"])
            status, r = self.post(self.gpu_review(i, "kube-system"), cert)
            statuses[status] = statuses.get(status, 0) + 1
            allowed += status == 200 and r["allowed"]
        created = len(self.templates("kube-system"))
        figure("dra_forged.allowed", "%d/200 in %.1f s" % (allowed, time.time() - t0))
        figure("dra_forged.templates_in_kube_system", created)
        figure("dra_forged.answers", statuses)
        self.assertEqual(created, 0, "made-up reviews created templates in kube-system")
        self.assertEqual(allowed, 0)
        # kube-apiserver, with its certificate, is served.
        status, r = self.post(self.gpu_review(0, "team-a", mib=4000), self.apiserver())
        self.assertEqual(status, 200)
        self.assertTrue(r["allowed"], r)
        self.assertEqual(list(self.templates("team-a")), ["vgpu-1-4000mi"])


class DraBounds(Dra):
    EXTRA = ("--dra-max-templates-per-namespace", "8", "--dra-max-templates", "12")

    def test_namespace_checked_and_creation_bounded(self):
        # A review for a namespace that does not exist (or is going away) creates nothing.
        status, r = self.post(self.gpu_review(0, "nowhere"), self.apiserver())
        self.assertEqual(status, 200)
        self.assertFalse(r["allowed"], r)
        self.assertIn("namespace nowhere does not exist", r["status"]["message"])
        self.assertEqual(self.templates("nowhere"), {})
        # Twenty shapes in one namespace: eight templates, then refusals naming the flag.
        answers = [self.post(self.gpu_review(i, "team-a"), self.apiserver())[1]
                   for i in range(20)]
        made = len(self.templates("team-a"))
        figure("dra_bounds.templates_for_20_shapes", made)
        self.assertEqual(made, 8)
        self.assertEqual(sum(a["allowed"] for a in answers), 8)
        self.assertIn("--dra-max-templates-per-namespace", answers[-1]["status"]["message"])
        # A shape the namespace holds already still works; another namespace has its own
        # room, up to the cluster's bound (12).
        status, r = self.post(self.gpu_review(3, "team-a"), self.apiserver())
        self.assertTrue(r["allowed"], r)
        answers = [self.post(self.gpu_review(i, "default"), self.apiserver())[1]
                   for i in range(8)]
        self.assertEqual(sum(a["allowed"] for a in answers), 4)
        self.assertIn("the most --dra-max-templates allows", answers[-1]["status"]["message"])


class DraSweep(Dra):
    EXTRA = ("--dra-template-sweep", "1", "--dra-template-grace", "2")

    def test_unused_templates_are_collected(self):
        # Two reviews whose pods never appear, and one whose pod is created.
        for i in (1, 2):
            status, r = self.post(self.gpu_review(i, "team-a"), self.apiserver())
            self.assertTrue(r["allowed"], r)
        pod = H.pod_object("real", {"cpu": "1"}, ns="team-a")
        pod["spec"]["resourceClaims"] = [{"name": "vgpu-0",
                                          "resourceClaimTemplateName": "vgpu-1-1001mi"}]
        self.cluster.create_pod(pod)
        self.assertEqual(sorted(self.templates("team-a")), ["vgpu-1-1001mi", "vgpu-1-1002mi"])
        deadline = time.time() + 15
        while time.time() < deadline and len(self.templates("team-a")) > 1:
            time.sleep(0.25)
        left = sorted(self.templates("team-a"))
        figure("dra_sweep.templates_left_after_15s", left)
        self.assertEqual(left, ["vgpu-1-1001mi"], "the unused template was never collected")
        # A template some admission uses again is made again.
        status, r = self.post(self.gpu_review(2, "team-a"), self.apiserver())
        self.assertTrue(r["allowed"], r)
        self.assertIn("vgpu-1-1002mi", self.templates("team-a"))


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
