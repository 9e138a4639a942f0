#!/usr/bin/env python3
"""vgpu-scheduler against the test API server, driven like kube-scheduler.

usage: scheduler_test.py VGPU_SCHEDULER_BINARY [unittest args]
"""
import base64
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest
import warnings
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scheduler_harness as H  # noqa: E402

BINARY = None


def check(cluster):
    """Invariant checker, run after every step: the scheduler's own model and, from the
    API alone, the sum of written decisions."""
    state = cluster.state()
    assert state["invariants"] == "ok", state["invariants"]
    for node, gpus in state["nodes"].items():
        for g in gpus:
            assert g["memUsedMiB"] <= g["memTotalMiB"], (node, g)
            assert g["coresUsed"] <= 100, (node, g)
            assert g["slots"] == 0 or g["tenants"] <= g["slots"], (node, g)
    H.check_api_invariants(cluster)
    return state


class SchedulerTest(unittest.TestCase):
    NODES = 6
    GPUS = 2

    def setUp(self):
        nodes = [H.node_object("node-%02d" % i, self.GPUS) for i in range(self.NODES)]
        self.cluster = H.Cluster(BINARY, nodes, ttl=2)
        self.cluster.wait_ready()
        self.names = ["node-%02d" % i for i in range(self.NODES)]

    def tearDown(self):
        self.cluster.stop()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(self.cluster.log()[-6000:])

    def make_pods(self, count, limits, prefix="p"):
        return [self.cluster.create_pod(H.pod_object("%s-%03d" % (prefix, i), limits))
                for i in range(count)]

    def schedule(self, conn, pod, cache=True):
        """One full kube-scheduler cycle: filter, prioritize, bind to the best node."""
        names, _ = self.cluster.filter(conn, pod, self.names, cache)
        if not names:
            return None
        scores = self.cluster.prioritize(conn, pod, names)
        best = max(scores, key=lambda s: s["Score"])["Host"]
        err = self.cluster.bind(conn, pod, best)
        self.assertEqual(err, "", err)
        return best

    def test_filter_many_before_binding_never_double_promises(self):
        # 6 nodes x 2 GPUs x 16000 MiB; each pod wants 6000 MiB and 30 % of a GPU: at most
        # 2 per GPU by memory, 3 by cores -> 24 pods fit, 40 are asked for.
        pods = self.make_pods(40, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000",
                                   "nvidia.com/gpucores": "30"})
        conns = [H.Http(self.cluster.port) for _ in range(8)]
        chosen = {}
        lock = threading.Lock()

        def worker(k):
            for pod in pods[k::8]:
                names, _ = self.cluster.filter(conns[k], pod, self.names)
                with lock:
                    chosen[pod["metadata"]["name"]] = names
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(self.cluster)
        fits = [n for n, names in chosen.items() if names]
        self.assertEqual(len(fits), 24)
        for names in chosen.values():
            self.assertLessEqual(len(names), 1)
        # Now bind them all, concurrently.
        errors = []

        def binder(k):
            for pod in pods[k::8]:
                names = chosen[pod["metadata"]["name"]]
                if names:
                    e = self.cluster.bind(conns[k], pod, names[0])
                    if e:
                        errors.append(e)
        threads = [threading.Thread(target=binder, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.cluster.sync_pods()  # the watch has shown the bindings
        used = check(self.cluster)
        bound = [p for p in self.cluster.list("pods") if p["spec"].get("nodeName")]
        self.assertEqual(len(bound), 24)
        for p in bound:
            decision = json.loads(p["metadata"]["annotations"]["vgpu.io/decision"])
            self.assertEqual(decision["node"], p["spec"]["nodeName"])
            self.assertEqual(decision["containers"][0]["name"], "main")
            self.assertEqual(decision["containers"][0]["gpus"][0]["memoryMiB"], 6000)
            self.assertEqual(decision["containers"][0]["gpus"][0]["cores"], 30)
        # The 16 that did not fit still do not.
        for pod in pods:
            if not chosen[pod["metadata"]["name"]]:
                names, body = self.cluster.filter(conns[0], pod, self.names)
                self.assertEqual(names, [])
                self.assertIn("no GPU with enough", json.dumps(body["FailedNodes"]))
        check(self.cluster)

    def test_full_cycles_both_cache_modes_and_exclusive(self):
        conn = H.Http(self.cluster.port)
        pods = self.make_pods(12, {"nvidia.com/gpu": "1"})  # whole cards: exclusive
        placed = [self.schedule(conn, pod, cache=(i % 2 == 0)) for i, pod in enumerate(pods)]
        check(self.cluster)
        self.assertEqual(sum(1 for p in placed if p), 12)
        extra = self.make_pods(1, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}, "x")[0]
        self.assertIsNone(self.schedule(conn, extra))  # every card is held exclusively
        state = check(self.cluster)
        for gpus in state["nodes"].values():
            for g in gpus:
                self.assertEqual(g["tenants"], 1)

    def test_assumption_expires_without_bind(self):
        conn = H.Http(self.cluster.port)
        pods = self.make_pods(4, {"nvidia.com/gpu": "2"})
        for pod in pods:
            names, _ = self.cluster.filter(conn, pod, self.names)
            self.assertEqual(len(names), 1)
        busy = sum(g["tenants"] for gpus in self.cluster.state()["nodes"].values() for g in gpus)
        self.assertEqual(busy, 8)
        # TTL 2 s, swept every second: the promises go without a bind.
        H.wait_for(lambda: sum(g["tenants"] for gpus in self.cluster.state()["nodes"].values()
                               for g in gpus) == 0, "the promises to expire", timeout=20)
        self.assertIn("no live filter decision", self.cluster.bind(conn, pods[0], "node-00"))

    def test_bind_conflict_on_changed_pod(self):
        conn = H.Http(self.cluster.port)
        pod = self.make_pods(1, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})[0]
        names, _ = self.cluster.filter(conn, pod, self.names)
        # Someone else changes the pod between filter and bind.
        status, _ = self.cluster.apic.request(
            "PATCH", "/api/v1/namespaces/default/pods/" + pod["metadata"]["name"],
            {"metadata": {"labels": {"touched": "yes"}}}, "application/merge-patch+json")
        self.assertEqual(status, 200)
        err = self.cluster.bind(conn, pod, names[0])
        self.assertIn("changed since it was filtered", err)
        self.assertIn("Precondition failed: ResourceVersion", err)
        after = self.cluster.get_pod(pod["metadata"]["name"])
        self.assertNotIn("nodeName", after["spec"])
        self.assertNotIn("vgpu.io/decision", after["metadata"].get("annotations", {}))
        check(self.cluster)
        # kube-scheduler retries with the fresh pod, and it goes through.
        fresh = self.cluster.get_pod(pod["metadata"]["name"])
        self.assertIsNotNone(self.schedule(conn, fresh))
        check(self.cluster)

    def test_bind_refused_for_recreated_pod(self):
        # The pod is deleted and created again under the same name between filter and
        # bind (the watch held back, so the scheduler has not seen it): the old decision
        # must not land on the new pod.
        conn = H.Http(self.cluster.port)
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
        pod = self.make_pods(1, limits)[0]
        name = pod["metadata"]["name"]
        names, _ = self.cluster.filter(conn, pod, self.names)
        self.assertEqual(len(names), 1)
        status, _ = self.cluster.apic.request("POST", "/admin/faults", {"watch_paused": True})
        self.assertEqual(status, 200)
        try:
            status, _ = self.cluster.apic.request(
                "DELETE", "/api/v1/namespaces/default/pods/" + name)
            self.assertEqual(status, 200)
            again = self.cluster.create_pod(H.pod_object(name, limits))
            self.assertNotEqual(again["metadata"]["uid"], pod["metadata"]["uid"])
            # kube-scheduler filtered the old pod and binds the new one: the scheduler
            # refuses before writing anything.
            err = self.cluster.bind(conn, again, names[0])
            self.assertIn("recreated since it was filtered", err)
            # kube-scheduler still holds the old pod: the API refuses (uid precondition).
            names, _ = self.cluster.filter(conn, pod, self.names)
            self.assertEqual(len(names), 1)
            err = self.cluster.bind(conn, pod, names[0])
            self.assertIn("Precondition failed: UID", err)
            fresh = self.cluster.get_pod(name)
            self.assertNotIn("nodeName", fresh["spec"])
            self.assertNotIn("vgpu.io/decision", fresh["metadata"].get("annotations", {}))
            check(self.cluster)
        finally:
            self.cluster.apic.request("POST", "/admin/faults", {"watch_paused": False})
        self.assertIsNotNone(self.schedule(conn, fresh))
        check(self.cluster)

    def test_priority_apart(self):
        """Two high-priority pods share a GPU only when no offered GPU can take the pod
        otherwise (docs/scheduler.md, "Priority"), whatever the GPU order would choose; the
        rule survives a restart (the priorities come from the pods' specs)."""
        conn = [H.Http(self.cluster.port)]
        binpack = {"hami.io/gpu-scheduler-policy": "binpack"}

        def place(name, prio):
            limits = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20",
                      "nvidia.com/gpumem": "1000"}
            if prio is not None:
                limits["nvidia.com/priority"] = prio
            pod = self.cluster.create_pod(H.pod_object(name, limits, binpack))
            names, body = self.cluster.filter(conn[0], pod, ["node-00"])
            self.assertEqual(names, ["node-00"], body)
            self.assertEqual(self.cluster.bind(conn[0], pod, "node-00"), "")
            d = json.loads(self.cluster.get_pod(name)["metadata"]["annotations"]["vgpu.io/decision"])
            return d["containers"][0]["gpus"][0]["uuid"]

        h1 = place("h1", "0")
        self.assertEqual(place("l1", "1"), h1)  # binpack: the most used GPU
        self.assertEqual(place("n1", None), h1)
        h2 = place("h2", "0")
        self.assertNotEqual(h2, h1)  # binpack would stack it on h1's GPU
        h3 = place("h3", "0")  # both GPUs hold one: it shares, rather than not run
        self.assertIn(h3, (h1, h2))
        self.cluster.sync_pods()
        high = sorted(g["highPriorityTenants"] for g in self.cluster.state()["nodes"]["node-00"])
        self.assertEqual(high, [1, 2])
        self.cluster.kill9()
        self.cluster.start()
        self.cluster.wait_ready()
        check(self.cluster)
        high = sorted(g["highPriorityTenants"] for g in self.cluster.state()["nodes"]["node-00"])
        self.assertEqual(high, [1, 2])
        # After the restart a fourth goes beside the GPU with one, not the one with two.
        conn[0] = H.Http(self.cluster.port)
        h4 = place("h4", "0")
        byuuid = {g["uuid"]: g["highPriorityTenants"] for g in self.cluster.state()["nodes"]["node-00"]}
        self.assertEqual(byuuid[h4], 2)
        # The dashboard marks the high-priority tenants.
        ui = self.cluster.ext.request("GET", "/ui/state.json")[1]
        node = next(n for n in ui["nodes"] if n["name"] == "node-00")
        marks = sorted((t["pod"], t["highPriority"]) for g in node["gpus"] for t in g["tenants"])
        self.assertEqual(marks, [("h1", True), ("h2", True), ("h3", True), ("h4", True),
                                 ("l1", False), ("n1", False)])
        check(self.cluster)

    def test_restart_kill9_rebuilds_same_state(self):
        conn = H.Http(self.cluster.port)
        rng = random.Random(7)
        pods = []
        for i in range(20):
            limits = rng.choice([{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000",
                                  "nvidia.com/gpucores": "20"},
                                 {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"},
                                 {"nvidia.com/gpumem": "5000"}])
            pods.append(self.cluster.create_pod(H.pod_object("r-%03d" % i, limits)))
        for pod in pods[:14]:
            self.schedule(conn, pod)
        self.cluster.sync_pods()  # the watch has shown the bindings
        before = check(self.cluster)
        before_bound = self.cluster.state(bound=True)
        self.cluster.kill9()
        self.cluster.start()
        self.cluster.wait_ready()
        after = check(self.cluster)
        self.maxDiff = None
        self.assertEqual(before_bound["nodes"], after["nodes"])
        self.assertEqual(before["nodes"], after["nodes"])
        # The rebuilt scheduler keeps deciding correctly.
        for pod in pods[14:]:
            self.schedule(H.Http(self.cluster.port), self.cluster.get_pod(pod["metadata"]["name"]))
        check(self.cluster)

    def test_restart_same_decisions_with_learned_mix(self):
        """fgd and default score against the mix of shapes the scheduler holds: rebuilt
        from the API after kill -9, it must decide exactly as before."""
        conn = H.Http(self.cluster.port)
        rng = random.Random(11)
        shapes = [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": c}
                  for c in ("10", "25", "30", "50", "70")] + [{"nvidia.com/gpu": "2"}]
        for policy in ("default", "fgd"):
            for i in range(5):
                pod = self.cluster.create_pod(H.pod_object(
                    "%s-%03d" % (policy, i), rng.choice(shapes), {"vgpu.io/policy": policy}))
                self.assertIsNotNone(self.schedule(conn, pod))
        self.cluster.sync_pods()  # the watch has shown the bindings
        check(self.cluster)
        probes = [self.cluster.create_pod(H.pod_object("probe-%d-%s" % (i, policy), shape,
                                                       {"vgpu.io/policy": policy}))
                  for i, shape in enumerate(shapes[:3]) for policy in ("default", "fgd")]

        def decide():
            c = H.Http(self.cluster.port)
            return [self.cluster.filter(c, pod, self.names)[0] for pod in probes]
        before = decide()
        self.assertTrue(all(len(n) == 1 for n in before), before)
        self.cluster.kill9()
        self.cluster.start()
        self.cluster.wait_ready()
        self.assertEqual(decide(), before)
        check(self.cluster)

    def test_restart_same_decisions_with_model_lists(self):
        """The learned mix keeps the pods' GPU-type lists: with half the nodes A10s, pods
        restricted to A10 (or away from it) keep default's decisions the same across a
        kill -9, and unrestricted pods are kept off the A10s the restricted ones need."""
        self.cluster.stop()
        a10 = ["node-%02d" % i for i in range(0, self.NODES, 2)]
        nodes = [H.node_object(n, self.GPUS, model="NVIDIA A10" if n in a10 else
                               "NVIDIA H100 80GB HBM3") for n in self.names]
        self.cluster = H.Cluster(BINARY, nodes, ttl=2)
        self.cluster.wait_ready()
        conn = H.Http(self.cluster.port)
        rng = random.Random(5)
        shape = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "30"}
        for i in range(12):
            ann = {"vgpu.io/policy": "default", "nvidia.com/use-gputype": "A10"}
            if i % 4 == 3:
                ann = {"vgpu.io/policy": "default", "nvidia.com/nouse-gputype": "a10"}
            pod = self.cluster.create_pod(H.pod_object("typed-%02d" % i, dict(
                shape, **{"nvidia.com/gpucores": rng.choice(("20", "30", "40"))}), ann))
            node = self.schedule(conn, pod)
            self.assertIsNotNone(node)
            self.assertEqual(node in a10, i % 4 != 3, (i, node))
        self.cluster.sync_pods()  # the watch has shown the bindings
        check(self.cluster)
        probes = [self.cluster.create_pod(H.pod_object(
            "probe-%d" % i, dict(shape, **{"nvidia.com/gpucores": c}),
            {"vgpu.io/policy": "default"})) for i, c in enumerate(("10", "30", "60"))]

        def decide():
            c = H.Http(self.cluster.port)
            return [self.cluster.filter(c, pod, self.names)[0] for pod in probes]
        before = decide()
        self.assertTrue(all(len(n) == 1 and n[0] not in a10 for n in before), before)
        self.cluster.kill9()
        self.cluster.start()
        self.cluster.wait_ready()
        self.assertEqual(decide(), before)
        check(self.cluster)

    def test_bad_input(self):
        conn = H.Http(self.cluster.port)
        status, body = conn.request("POST", "/filter", b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("malformed JSON", body["Error"])
        status, body = conn.request("POST", "/filter", {"Pod": {}, "NodeNames": [], "Extra": 1})
        self.assertEqual(status, 400)
        self.assertIn('unknown field "Extra"', body["Error"])
        status, body = conn.request("POST", "/filter", {"Pod": {"metadata": {"name": "a"}}})
        self.assertEqual(status, 400)
        self.assertIn("neither NodeNames nor Nodes", body["Error"])
        status, body = conn.request("POST", "/filter", [1, 2])
        self.assertEqual(status, 400)
        status, body = conn.request("POST", "/bind", {"PodName": "a"})
        self.assertEqual(status, 400)
        self.assertIn("PodName and Node are required", body["Error"])
        status, _ = conn.request("POST", "/filter", b"[" * 100000 + b"]" * 100000)
        self.assertEqual(status, 400)
        big = b'{"Pod": {}, "NodeNames": ["' + b"x" * (17 << 20) + b'"]}'
        try:
            status, _ = H.Http(self.cluster.port).request("POST", "/filter", big, raw=True)
            self.assertIn(status, (400, 413))
        except (ConnectionError, OSError):
            pass  # the server may close while we are still sending: also a refusal
        status, _ = conn.request("GET", "/filter")
        self.assertEqual(status, 405)
        # Impossible requests get an Error the user can read.
        pod = H.pod_object("bad-cores", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"})
        names, body = self.cluster.filter(conn, pod, self.names)
        self.assertEqual(names, [])
        self.assertIn("gpucores 150 is over 100", body["Error"])
        pod = H.pod_object("bad-num", {"nvidia.com/gpu": "one"})
        names, body = self.cluster.filter(conn, pod, self.names)
        self.assertIn("nvidia.com/gpu", body["Error"])
        pod = H.pod_object("bad-policy", {"nvidia.com/gpu": "1"},
                           {"hami.io/node-scheduler-policy": "fastest"})
        names, body = self.cluster.filter(conn, pod, self.names)
        self.assertIn("not binpack or spread", body["Error"])
        # Unknown nodes and garbled pod decisions: skipped with a reason, nothing charged.
        pod = self.cluster.create_pod(
            H.pod_object("ok", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}))
        names, body = self.cluster.filter(conn, pod, ["nope"] + self.names)
        self.assertIn("unknown to the scheduler", body["FailedNodes"]["nope"])
        self.assertEqual(len(names), 1)
        garbled = H.pod_object("garbled", {"nvidia.com/gpu": "1"},
                               {"vgpu.io/decision": '{"version":1,"node":7}'})
        garbled["spec"]["nodeName"] = "node-00"
        self.cluster.create_pod(garbled)
        H.wait_for(lambda: "pod decision skipped" in self.cluster.log(),
                   "the garbled decision to be skipped")
        self.assertEqual(self.cluster.sched.poll(), None)
        check(self.cluster)

    def test_garbled_and_stale_inventory(self):
        status, _ = self.cluster.apic.request(
            "PATCH", "/api/v1/nodes/node-01",
            {"metadata": {"annotations": {"vgpu.io/gpus": "{\"version\":1,\"gpus\":5}"}}},
            "application/merge-patch+json")
        self.assertEqual(status, 200)
        status, _ = self.cluster.apic.request(
            "PATCH", "/api/v1/nodes/node-02",
            {"metadata": {"annotations": {"vgpu.io/gpus": H.inventory("node-02", 2,
                                                                      heartbeat=1000)}}},
            "application/merge-patch+json")
        H.wait_for(lambda: "node inventory skipped" in self.cluster.log(),
                   "the garbled inventory to be skipped")
        pod = self.cluster.create_pod(
            H.pod_object("one", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}))
        names, body = self.cluster.filter(H.Http(self.cluster.port), pod, self.names)
        self.assertIn("no valid vgpu.io/gpus inventory", body["FailedNodes"]["node-01"])
        self.assertNotIn("node-01", names)
        check(self.cluster)

    def test_metrics(self):
        conn = H.Http(self.cluster.port)
        pod = self.make_pods(1, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})[0]
        self.schedule(conn, pod)
        status, text = conn.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('vgpu_scheduler_decisions_total{result="fit"} 1', text)
        self.assertIn('vgpu_scheduler_binds_total{result="ok"} 1', text)
        self.assertIn('vgpu_scheduler_request_duration_seconds_count{verb="filter"} 1', text)
        self.assertIn('vgpu_scheduler_nodes{inventory="valid"} 6', text)
        self.assertRegex(text, r'vgpu_scheduler_gpu_memory_used_mib\{node="node-\d+",'
                               r'uuid="GPU-node-\d+-\d"\} 1000')
        # Histogram buckets are cumulative and end at +Inf == count.
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            name, value = line.rsplit(" ", 1)
            float(value)


class WebhookTest(unittest.TestCase):
    def setUp(self):
        self.dir = __import__("tempfile").mkdtemp(prefix="vgpu-webhook-")
        self.cert = os.path.join(self.dir, "tls.crt")
        self.key = os.path.join(self.dir, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=vgpu-scheduler", "-keyout", self.key, "-out", self.cert],
                       check=True, capture_output=True)
        # Port 0 and --webhook-port-file: a port picked here could be taken by another
        # test's connection before the scheduler binds it.
        nodes = [H.node_object("node-%02d" % i, 2) for i in range(2)]
        hook_file = os.path.join(self.dir, "webhook.port")
        self.cluster = H.Cluster(BINARY, nodes, extra_args=[
            "--webhook-listen", "127.0.0.1:0", "--webhook-port-file", hook_file,
            "--tls-cert", self.cert, "--tls-key", self.key])
        self.wport = H.wait_port_file(hook_file, self.cluster.sched)
        self.cluster.wait_ready()

    def tearDown(self):
        self.cluster.stop()

    def admit(self, pod):
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.check_hostname = False
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx, timeout=10)
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u-1", "operation": "CREATE", "object": pod}}
        conn.request("POST", "/webhook", json.dumps(review),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        self.assertEqual(resp.status, 200)
        self.assertEqual(body["response"]["uid"], "u-1")
        return body["response"]

    def test_webhook(self):
        pod = H.pod_object("w", {"nvidia.com/gpumem": "4000"})
        del pod["spec"]["schedulerName"]
        r = self.admit(pod)
        self.assertTrue(r["allowed"])
        patch = json.loads(base64.b64decode(r["patch"]))
        self.assertIn({"op": "add", "path": "/spec/schedulerName", "value": "vgpu-scheduler"},
                      patch)
        self.assertIn({"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu",
                       "value": "1"}, patch)
        r = self.admit(H.pod_object("big", {"nvidia.com/gpu": "1",
                                            "nvidia.com/gpumem": "200000"}))
        self.assertFalse(r["allowed"])
        self.assertIn("more than the largest GPU in the cluster has (16000 MiB)",
                      r["status"]["message"])
        r = self.admit(H.pod_object("cores", {"nvidia.com/gpu": "1",
                                              "nvidia.com/gpucores": "120"}))
        self.assertFalse(r["allowed"])
        self.assertIn("over 100", r["status"]["message"])
        r = self.admit(H.pod_object("type", {"nvidia.com/gpu": "1"},
                                    {"nvidia.com/use-gputype": "A100"}))
        self.assertFalse(r["allowed"])
        self.assertIn("use-gputype 'A100'", r["status"]["message"])
        # A pod without GPUs is admitted as it is, but for NVIDIA_VISIBLE_DEVICES=void
        # (--overwrite-env, on by default): NVIDIA's runtime gives it no GPU.
        r = self.admit(H.pod_object("cpu", {"cpu": "1"}))
        self.assertTrue(r["allowed"])
        self.assertEqual(json.loads(base64.b64decode(r["patch"])), [
            {"op": "add", "path": "/spec/containers/0/env",
             "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}])

    def test_port_file_needs_the_webhook(self):
        r = subprocess.run([BINARY, "--webhook-port-file", os.path.join(self.dir, "p")],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--webhook-port-file needs --webhook-listen", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "p")))
        # With the webhook, the file holds the port it serves on (setUp read it).
        self.assertGreater(self.wport, 0)

    def test_priority(self):
        # HAMi's nvidia.com/priority: 0 (high) and 1 (low) are admitted as they are (the
        # device plugin writes them into the limits file); anything else is refused.
        for v in ("0", "1", 0):
            r = self.admit(H.pod_object("p", {"nvidia.com/gpu": "1", "nvidia.com/priority": v}))
            self.assertTrue(r["allowed"], r)
        for v, shown in (("2", "'2'"), ("-1", "'-1'"), ("high", "'high'"), (2, "2"), (-1, "-1"),
                         ("0.5", "'0.5'"), ("1k", "'1k'"), ("x" * 40, "a value")):
            r = self.admit(H.pod_object("p", {"nvidia.com/gpu": "1", "nvidia.com/priority": v}))
            self.assertFalse(r["allowed"], v)
            self.assertIn("container main: nvidia.com/priority %s is not 0 (high) or 1 (low" % shown,
                          r["status"]["message"])


def model_matches_api(cluster):
    """The scheduler's bound model equals the decisions in the API, GPU by GPU."""
    used = H.check_api_invariants(cluster)
    state = cluster.state(bound=True)
    model = {}
    for gpus in state["nodes"].values():
        for g in gpus:
            if g["tenants"] or g["memUsedMiB"]:
                model[g["uuid"]] = [g["memUsedMiB"], g["tenants"]]
    api = {u: [v[0], v[2]] for u, v in used.items() if v[2]}
    return model == api, model, api


class FaultTest(unittest.TestCase):
    """The scheduler under the API faults the issue lists: dropped watches, 410 Gone,
    watch ERROR events and garbage, 500s, 409s and slow responses. Under each it keeps
    serving, reconnects or relists, and never over-allocates (check() after every step)."""
    NODES = 4
    GPUS = 2

    def setUp(self):
        nodes = [H.node_object("node-%02d" % i, self.GPUS) for i in range(self.NODES)]
        self.cluster = H.Cluster(BINARY, nodes, ttl=30)
        self.cluster.wait_ready()
        self.names = ["node-%02d" % i for i in range(self.NODES)]
        self.conn = H.Http(self.cluster.port)
        self.serial = 0

    def tearDown(self):
        self.cluster.stop()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(self.cluster.log()[-6000:])

    def admin(self, what, body=None):
        status, res = self.cluster.apic.request("POST", "/admin/" + what, body or {})
        self.assertEqual(status, 200, res)

    def api_stats(self):
        status, res = self.cluster.apic.request("GET", "/admin/stats")
        self.assertEqual(status, 200, res)
        return res

    def new_pod(self, mem="3000"):
        self.serial += 1
        return self.cluster.create_pod(H.pod_object(
            "f-%03d" % self.serial, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem}))

    def cycle(self, pod):
        """filter, prioritize, bind; returns (node or None, bind error)."""
        names, body = self.cluster.filter(self.conn, pod, self.names)
        if not names:
            return None, body.get("Error") or "unschedulable"
        self.cluster.prioritize(self.conn, pod, names)
        return names[0], self.cluster.bind(self.conn, pod, names[0])

    def schedule(self, pod, tries=20):
        """kube-scheduler's loop: retry with the fresh pod until the bind goes through."""
        for _ in range(tries):
            node, err = self.cycle(self.cluster.get_pod(pod["metadata"]["name"]))
            check(self.cluster)
            if node is not None and err == "":
                return node
            time.sleep(0.3)
        self.fail("pod %s never bound: %s" % (pod["metadata"]["name"], err))

    def wait_converged(self, timeout=20):
        deadline = time.time() + timeout
        while True:
            ok, model, api = model_matches_api(self.cluster)
            check(self.cluster)
            if ok:
                return
            if time.time() > deadline:
                self.fail("model %s never matched the API %s" % (model, api))
            time.sleep(0.2)

    def delete_pod(self, pod):
        status, _ = self.cluster.apic.request(
            "DELETE", "/api/v1/namespaces/default/pods/" + pod["metadata"]["name"])
        self.assertEqual(status, 200)

    def test_dropped_watch_reconnects_and_catches_up(self):
        pods = [self.new_pod() for _ in range(4)]
        for pod in pods:
            self.schedule(pod)
        self.wait_converged()
        watches = self.api_stats()["watches"]
        self.admin("inject", {"action": "drop"})
        # While the watches are down: a bound pod goes away and a node joins.
        self.delete_pod(pods[0])
        status, _ = self.cluster.apic.request("POST", "/api/v1/nodes",
                                              H.node_object("node-new", self.GPUS))
        self.assertEqual(status, 201)
        self.names.append("node-new")
        # Filters are served meanwhile; the model catches up after the reconnect.
        self.schedule(self.new_pod())
        self.wait_converged()
        deadline = time.time() + 20
        while "node-new" not in self.cluster.state()["nodes"]:
            self.assertLess(time.time(), deadline, "the new node never showed up")
            time.sleep(0.2)
        self.assertGreater(self.api_stats()["watches"], watches)
        # Every watch cut after each event: scheduling still converges.
        self.admin("faults", {"drop_after_events": 1})
        for _ in range(4):
            self.schedule(self.new_pod())
        self.admin("reset")
        self.wait_converged()

    def test_410_gone_relists(self):
        pods = [self.new_pod() for _ in range(3)]
        for pod in pods:
            self.schedule(pod)
        self.wait_converged()
        for http_410 in (False, True):
            lists = self.api_stats()["lists"]
            self.admin("faults", {"watch_410_http": http_410})
            # Cut the watches, change the state, and forget the events: the watch can
            # only resume from a compacted version, gets 410, and must relist.
            self.admin("inject", {"action": "drop"})
            self.delete_pod(pods.pop(0))
            self.admin("compact")
            self.admin("inject", {"action": "expire"})
            self.wait_converged()
            deadline = time.time() + 20
            while self.api_stats()["lists"] <= lists:
                self.assertLess(time.time(), deadline, "no relist after 410")
                time.sleep(0.2)
            self.schedule(self.new_pod())
            self.wait_converged()
        self.admin("reset")

    def test_watch_error_event_and_garbage(self):
        self.schedule(self.new_pod())
        for action in ("error", "malformed"):
            watches = self.api_stats()["watches"]
            self.admin("inject", {"action": action})
            deadline = time.time() + 20
            while self.api_stats()["watches"] <= watches:
                self.assertLess(time.time(), deadline, "no reconnect after " + action)
                time.sleep(0.2)
            self.schedule(self.new_pod())
            self.wait_converged()

    def promised(self):
        """GPU memory held by promises (state minus bound state), in MiB."""
        total = sum(g["memUsedMiB"] for gpus in self.cluster.state()["nodes"].values()
                    for g in gpus)
        bound = sum(g["memUsedMiB"] for gpus in self.cluster.state(bound=True)["nodes"].values()
                    for g in gpus)
        return total - bound

    def test_500_on_binding(self):
        # The binding answers 500 without writing: nothing is in the API, the promise
        # stays charged (the outcome was unknown to the scheduler), and kube-scheduler's
        # retry replaces it and binds.
        pod = self.new_pod("5000")
        name = pod["metadata"]["name"]
        path = "/api/v1/namespaces/default/pods/%s/binding" % name
        self.admin("faults", {"fail_next": 1, "fail_status": 500, "match": "POST " + path})
        node, err = self.cycle(pod)
        self.assertIsNotNone(node)
        self.assertIn("binding the pod failed", err)
        check(self.cluster)
        written = self.cluster.get_pod(name)
        self.assertNotIn("nodeName", written["spec"])
        self.assertNotIn("vgpu.io/decision", written["metadata"].get("annotations", {}))
        self.assertEqual(self.promised(), 5000)
        self.wait_converged()
        self.schedule(pod)
        self.assertEqual(self.promised(), 0)
        self.wait_converged()
        # The binding is written but its answer is lost (a 500 after the write): the
        # scheduler keeps the share until the watch shows the pod bound with it, and the
        # model then equals the API; a retry of the bind is refused by the API (bound).
        pod = self.new_pod("5000")
        name = pod["metadata"]["name"]
        path = "/api/v1/namespaces/default/pods/%s/binding" % name
        self.admin("faults", {"fail_next": 1, "fail_status": 500, "fail_after": True,
                              "match": "POST " + path})
        node, err = self.cycle(pod)
        self.assertIn("binding the pod failed", err)
        check(self.cluster)
        written = self.cluster.get_pod(name)
        self.assertEqual(written["spec"]["nodeName"], node)
        self.assertIn("vgpu.io/decision", written["metadata"]["annotations"])
        self.wait_converged()
        deadline = time.time() + 20
        while self.promised() != 0:
            self.assertLess(time.time(), deadline, "the bound share stayed a promise")
            time.sleep(0.2)
        self.admin("reset")
        names, _ = self.cluster.filter(self.conn, written, self.names)
        self.assertEqual(names, [node])
        self.wait_converged()

    def test_409_on_binding(self):
        pod = self.new_pod()
        path = "/api/v1/namespaces/default/pods/%s/binding" % pod["metadata"]["name"]
        self.admin("faults", {"fail_next": 1, "fail_status": 409, "match": "POST " + path})
        _, err = self.cycle(pod)
        self.assertIn("binding the pod failed", err)
        self.assertIn("conflict", err)
        self.assertEqual(self.promised(), 0)  # refused: nothing written, the promise goes
        check(self.cluster)
        self.schedule(pod)
        self.admin("reset")
        self.wait_converged()

    def test_slow_api_does_not_stall_filters(self):
        # The API takes 2 s per binding; binds wait, filters do not.
        self.admin("faults", {"delay_ms": 2000, "match": "/binding"})
        slow = [self.new_pod() for _ in range(3)]
        quick = self.new_pod()
        results = []

        def bind_slowly(pod):
            c = H.Http(self.cluster.port)
            names, _ = self.cluster.filter(c, pod, self.names)
            results.append(self.cluster.bind(c, pod, names[0]))
        threads = [threading.Thread(target=bind_slowly, args=(p,)) for p in slow]
        delayed = self.api_stats().get("delayed", 0)
        for t in threads:
            t.start()
        H.wait_for(lambda: self.api_stats().get("delayed", 0) >= delayed + 3,
                   "the three bindings to wait on the API")
        t0 = time.time()
        names, _ = self.cluster.filter(self.conn, quick, self.names)
        self.assertEqual(len(names), 1)
        self.assertLess(time.time() - t0, 1.5)
        check(self.cluster)
        for t in threads:
            t.join(30)
        self.assertEqual(results, ["", "", ""])
        self.admin("reset")
        self.assertEqual(self.cluster.bind(self.conn, quick, names[0]), "")
        self.wait_converged()


if __name__ == "__main__":
    warnings.simplefilter("ignore", ResourceWarning)
    BINARY = sys.argv.pop(1)
    unittest.main(verbosity=2)
