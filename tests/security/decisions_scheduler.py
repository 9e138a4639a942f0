#!/usr/bin/env python3
"""A pod author writes their own vgpu.io/decision: the webhook and vgpu-scheduler.

usage: decisions_scheduler.py VGPU_SCHEDULER_BINARY [unittest args]

Each test plays the author and asserts the forgery changes nothing (docs/security.md,
"Decisions only the scheduler can write"). The cluster: tests/kube_api_server.py with one
node of one 16000 MiB GPU, driven like kube-scheduler (tests/integration/scheduler_harness.py).
"""
import base64
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import scheduler_harness as H  # noqa: E402

BINARY = None
NODE = "node-00"
GPU = "GPU-node-00-0"


def forged(mib, cores, node=NODE, uuid=GPU, container="main", time_s=0):
    return json.dumps({"version": 1, "node": node, "time": time_s, "containers": [
        {"name": container, "gpus": [{"uuid": uuid, "memoryMiB": mib, "cores": cores}]}]},
        sort_keys=True, separators=(",", ":"))


def bound_use(cluster):
    """Per GPU, what the decisions of the pods bound to a node add up to: [MiB, cores,
    tenants]. Unbound pods hold nothing, whatever their annotations say."""
    used = {}
    for pod in cluster.list("pods"):
        node = pod["spec"].get("nodeName")
        text = pod["metadata"].get("annotations", {}).get("vgpu.io/decision")
        if not node or not text:
            continue
        for c in json.loads(text)["containers"]:
            for g in c["gpus"]:
                u = used.setdefault(g["uuid"], [0, 0, 0])
                u[0] += g["memoryMiB"]
                u[1] += g["cores"]
                u[2] += 1
    return used


class ForgedDecisionTest(unittest.TestCase):
    """The scheduler binds only decisions it made, and only ones that fit."""

    def setUp(self):
        H.one_gpu_cluster(self, BINARY, NODE, ttl=30)

    def wait_watch(self, name, pred, timeout=20):
        """Until the scheduler's watch has surely seen the API's state: the API changes
        first, the test then waits until filter's answer reflects it (or the timeout)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return True
            time.sleep(0.05)
        return False

    def schedule(self, pod):
        """kube-scheduler's cycle for pod: the nodes filter passes, and the bind's error
        ("" when bound; None when filter passed no node)."""
        names, _ = self.cluster.filter(self.conn, pod, [NODE])
        if not names:
            return None
        return self.cluster.bind(self.conn, pod, names[0])

    def legit_tenant(self):
        pod = self.cluster.create_pod(H.pod_object("tenant", {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "50"}))
        self.assertEqual(self.schedule(pod), "")
        self.assertTrue(self.wait_watch("tenant", lambda: self.cluster.get_pod("tenant")
                                        ["spec"].get("nodeName") == NODE))
        time.sleep(0.5)  # the watch event of the binding reaches the scheduler

    def test_unbound_forged_decision_is_not_bound(self):
        self.legit_tenant()
        # The attacker asks for the whole GPU and writes a decision putting it beside the
        # tenant. Filter and bind run as kube-scheduler runs them.
        attacker = self.cluster.create_pod(H.pod_object("attacker", {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000", "nvidia.com/gpucores": "100"},
            {"vgpu.io/decision": forged(16000, 100, time_s=0)}))
        time.sleep(0.5)
        names, _ = self.cluster.filter(self.conn, attacker, [NODE])
        err = self.cluster.bind(self.conn, attacker, NODE)
        self.assertNotEqual(err, "", "the forged decision was bound (filter passed %s)" % names)
        pod = self.cluster.get_pod("attacker")
        self.assertIsNone(pod["spec"].get("nodeName"), "attacker bound: %s" % pod)
        use = bound_use(self.cluster).get(GPU, [0, 0, 0])
        self.assertLessEqual(use[0], 16000, use)
        self.assertLessEqual(use[1], 100, use)
        # A pod that fits beside the tenant is still placed: the GPU is not lost to the
        # forgery, and the decision bound is the scheduler's own.
        third = self.cluster.create_pod(H.pod_object("third", {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}))
        self.assertEqual(self.schedule(third), "")
        use = bound_use(self.cluster)[GPU]
        self.assertEqual(use, [12000, 80, 2])

    def test_bound_overcommitting_decision_blocks_the_gpu(self):
        self.legit_tenant()
        # Created already bound (spec.nodeName) with a decision that does not fit beside
        # the tenant: the GPU may really be full now, so nothing more goes there.
        rogue = H.pod_object("rogue", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000",
                                       "nvidia.com/gpucores": "100"},
                             {"vgpu.io/decision": forged(16000, 100, time_s=0)})
        rogue["spec"]["nodeName"] = NODE
        self.cluster.create_pod(rogue)
        third = self.cluster.create_pod(H.pod_object("third", {
            "nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}))
        deadline = time.time() + 5
        result = None
        while time.time() < deadline:  # give the watch its time to show the rogue pod
            names, _ = self.cluster.filter(self.conn, third, [NODE])
            if names:
                result = names
            time.sleep(0.2)
        self.assertFalse(result, "a third pod was placed beside an over-committing one")
        err = self.cluster.bind(self.conn, third, NODE)
        self.assertNotEqual(err, "")
        self.assertIsNone(self.cluster.get_pod("third")["spec"].get("nodeName"))
        # Once the rogue pod is gone, the GPU takes pods again.
        status, body = self.cluster.apic.request("DELETE", "/api/v1/namespaces/default/pods/rogue")
        self.assertIn(status, (200, 202), body)
        self.assertTrue(self.wait_watch("third", lambda: bool(
            self.cluster.filter(self.conn, third, [NODE])[0])))
        self.assertEqual(self.cluster.bind(self.conn, third, NODE), "")


class WebhookForgeryTest(unittest.TestCase):
    """The webhook refuses pods that carry, add or change vgpu's own annotations."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-sec-webhook-")
        self.cert = os.path.join(self.dir, "tls.crt")
        self.key = os.path.join(self.dir, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=vgpu-scheduler", "-keyout", self.key, "-out", self.cert],
                       check=True, capture_output=True)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.wport = s.getsockname()[1]
        s.close()
        self.cluster = H.Cluster(BINARY, [H.node_object(NODE, 1)], extra_args=[
            "--webhook-listen", "127.0.0.1:%d" % self.wport, "--tls-cert", self.cert,
            "--tls-key", self.key])
        self.cluster.wait_ready()

    def tearDown(self):
        self.cluster.stop()

    def review(self, request):
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.check_hostname = False
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx, timeout=10)
        conn.request("POST", "/webhook", json.dumps({"apiVersion": "admission.k8s.io/v1",
                                                     "kind": "AdmissionReview",
                                                     "request": request}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()

    def admit(self, pod, operation="CREATE", old=None):
        request = {"uid": "u-1", "operation": operation, "object": pod}
        if old is not None:
            request["oldObject"] = old
        status, text = self.review(request)
        self.assertEqual(status, 200, text)
        body = json.loads(text)
        return body["response"]

    def test_bad_reviews(self):
        pod = H.pod_object("a", {"cpu": "1"}, {"vgpu.io/decision": forged(1, 1)})
        status, text = self.review({"uid": "u-1", "operation": "UPDATE", "object": pod})
        self.assertEqual(status, 400, text)
        self.assertIn("an UPDATE needs request.oldObject", text)
        # A DELETE carries no object: nothing to check, allowed.
        status, text = self.review({"uid": "u-2", "operation": "DELETE", "object": None})
        self.assertEqual(status, 200, text)
        self.assertTrue(json.loads(text)["response"]["allowed"])

    def refused(self, r):
        self.assertFalse(r["allowed"], r)
        self.assertIn("vgpu.io/decision", r["status"]["message"])
        self.assertIn("only vgpu-scheduler writes it", r["status"]["message"])

    def test_create_with_forged_decision_refused(self):
        gpu = H.pod_object("a", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
                           {"vgpu.io/decision": forged(16000, 100)})
        self.refused(self.admit(gpu))
        # Without a GPU request too: the device plugin must never see such a pod.
        cpu = H.pod_object("b", {"cpu": "1"}, {"vgpu.io/decision": forged(1, 1)})
        del cpu["spec"]["schedulerName"]
        self.refused(self.admit(cpu))
        # Any other key vgpu reserves under vgpu.io/ as well.
        r = self.admit(H.pod_object("c", {"cpu": "1"}, {"vgpu.io/gpus": "{}"}))
        self.assertFalse(r["allowed"], r)
        self.assertIn("vgpu.io/gpus", r["status"]["message"])

    def test_update_adding_or_changing_decision_refused(self):
        old = H.pod_object("a", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})
        new = json.loads(json.dumps(old))
        new["metadata"]["annotations"]["vgpu.io/decision"] = forged(4000, 0)
        self.refused(self.admit(new, "UPDATE", old))
        # A bound pod's decision, changed by its author.
        bound = json.loads(json.dumps(new))
        bound["spec"]["nodeName"] = NODE
        changed = json.loads(json.dumps(bound))
        changed["metadata"]["annotations"]["vgpu.io/decision"] = forged(16000, 100)
        self.refused(self.admit(changed, "UPDATE", bound))

    def test_legit_pods_pass(self):
        # An ordinary update of a bound pod: its decision is unchanged.
        bound = H.pod_object("a", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
                             {"vgpu.io/decision": forged(4000, 0)})
        bound["spec"]["nodeName"] = NODE
        relabeled = json.loads(json.dumps(bound))
        relabeled["metadata"]["labels"] = {"team": "ml"}
        relabeled["metadata"]["annotations"]["note"] = "x"
        r = self.admit(relabeled, "UPDATE", bound)
        self.assertTrue(r["allowed"], r)
        self.assertNotIn("patch", r)
        # The per-pod policy is the author's to set (removing the decision is not:
        # security.attacks.sched.decision_removal).
        plain = json.loads(json.dumps(bound))
        plain["metadata"]["annotations"]["vgpu.io/policy"] = "spread"
        self.assertTrue(self.admit(plain, "UPDATE", bound)["allowed"])
        r = self.admit(H.pod_object("p", {"nvidia.com/gpumem": "4000"},
                                    {"vgpu.io/policy": "binpack"}))
        self.assertTrue(r["allowed"], r)
        patch = json.loads(base64.b64decode(r["patch"]))
        self.assertIn({"op": "add", "path": "/spec/schedulerName", "value": "vgpu-scheduler"},
                      patch)

    # ---- Volcano's decision (docs/volcano.md): the same rule for its annotations ----

    VOLCANO_DECISION = {"volcano.sh/vgpu-node": NODE, "volcano.sh/vgpu-time": "1764385200",
                        "volcano.sh/vgpu-ids-new": "GPU-0,NVIDIA,80000,100:",
                        "volcano.sh/devices-to-allocate": "GPU-0,NVIDIA,80000,100:",
                        "volcano.sh/bind-phase": "allocating",
                        "volcano.sh/bind-time": "1764385200"}

    @staticmethod
    def volcano_pod(name, annotations=None):
        pod = H.pod_object(name, {"volcano.sh/vgpu-number": "1",
                                  "volcano.sh/vgpu-memory": "1000"}, annotations)
        pod["spec"]["schedulerName"] = "volcano"
        return pod

    def test_volcano_decision_refused_at_create(self):
        """Each key of Volcano's decision, alone, on a Volcano pod (with spec.nodeName, to
        skip the scheduler) and on a pod with no GPU: refused, naming the key."""
        for key, value in self.VOLCANO_DECISION.items():
            for pod in (self.volcano_pod("v", {key: value}),
                        H.pod_object("c", {"cpu": "1"}, {key: value})):
                pod["spec"]["nodeName"] = NODE
                with self.subTest(key=key, pod=pod["metadata"]["name"]):
                    r = self.admit(pod)
                    self.assertFalse(r["allowed"], r)
                    self.assertIn("annotation %s is part of Volcano's vGPU decision" % key,
                                  r["status"]["message"])
        # Any other volcano.sh/vgpu- key too, but not the four Volcano gives pod authors.
        r = self.admit(self.volcano_pod("w", {"volcano.sh/vgpu-anything": "x"}))
        self.assertFalse(r["allowed"], r)
        authors = {"volcano.sh/vgpu-mode": "hami-core", "volcano.sh/vgpu-podgroup-policy": "spread",
                   "volcano.sh/vgpu-use-gpuuuid": "GPU-0", "volcano.sh/vgpu-nouse-gpuuuid": "GPU-1",
                   "volcano.sh/queue-name": "default"}
        r = self.admit(self.volcano_pod("ok", authors))
        self.assertTrue(r["allowed"], r)

    def review_as(self, user, pod, old):
        status, text = self.review({"uid": "u-1", "operation": "UPDATE", "object": pod,
                                    "oldObject": old, "userInfo": {"username": user}})
        self.assertEqual(status, 200, text)
        return json.loads(text)["response"]

    def test_volcano_decision_update(self):
        """An UPDATE that adds, changes or removes a key of the decision: refused for the
        pod's author, allowed for a trusted user (the device plugin's write-back)."""
        old = self.volcano_pod("v", self.VOLCANO_DECISION)
        old["spec"]["nodeName"] = NODE
        success = json.loads(json.dumps(old))
        success["metadata"]["annotations"].update({"volcano.sh/bind-phase": "success",
                                                   "volcano.sh/devices-to-allocate": ""})
        author = "system:serviceaccount:default:default"
        plugin = "system:serviceaccount:vgpu-system:vgpu-device-plugin"
        r = self.review_as(author, success, old)
        self.assertFalse(r["allowed"], r)
        self.assertIn("volcano.sh/", r["status"]["message"])
        self.assertTrue(self.review_as(plugin, success, old)["allowed"])
        removed = json.loads(json.dumps(old))
        del removed["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"]
        r = self.review_as(author, removed, old)
        self.assertFalse(r["allowed"], r)
        self.assertIn("remove it (put it back as it was)", r["status"]["message"])
        changed = json.loads(json.dumps(old))
        changed["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"] = "GPU-1,NVIDIA,80000,100:"
        self.assertFalse(self.review_as(author, changed, old)["allowed"])

    def test_volcano_gpu_container_keeps_its_devices(self):
        """A container that asks for Volcano's vGPU resources is a GPU container: it does
        not get NVIDIA_VISIBLE_DEVICES=void (which would hide the GPUs the device plugin
        gives it); the pod's container without GPUs does."""
        pod = self.volcano_pod("v")
        pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
        r = self.admit(pod)
        self.assertTrue(r["allowed"], r)
        patch = json.loads(base64.b64decode(r["patch"]))
        paths = [op["path"] for op in patch if "env" in op["path"]]
        self.assertEqual(paths, ["/spec/containers/1/env"], patch)

    def test_resize_request_open_answer_reserved(self):
        """vgpu.io/resize is anyone's who may patch the pod (RBAC decides); its answer and
        the decision stay vgpu's: a tenant cannot mark its own request done."""
        bound = H.pod_object("a", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"},
                             {"vgpu.io/decision": forged(4000, 0)})
        bound["spec"]["nodeName"] = NODE
        asked = json.loads(json.dumps(bound))
        asked["metadata"]["annotations"]["vgpu.io/resize"] = \
            '{"version":1,"id":"r-1","memoryMiB":8000}'
        self.assertTrue(self.admit(asked, "UPDATE", bound)["allowed"])
        answered = json.loads(json.dumps(asked))
        answered["metadata"]["annotations"]["vgpu.io/resize-status"] = \
            '{"version":1,"id":"r-1","state":"done","generation":1}'
        r = self.admit(answered, "UPDATE", asked)
        self.assertFalse(r["allowed"], r)
        self.assertIn("vgpu.io/resize-status", r["status"]["message"])
        # The request and a decision raised by the tenant together: refused.
        both = json.loads(json.dumps(asked))
        both["metadata"]["annotations"]["vgpu.io/decision"] = forged(8000, 0)
        self.refused(self.admit(both, "UPDATE", bound))


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
