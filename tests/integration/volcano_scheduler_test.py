#!/usr/bin/env python3
"""The Volcano scheduler stand-in (tests/volcano_scheduler.py) against cases computed by
hand from Volcano's source (volcano-sh/volcano ed72c7c8, pkg/scheduler/api/devices/nvidia/
vgpu/utils.go, hamicore.go, device_info.go; nodelock.go), then on the wire against the
test API server: the decision on the Binding (head) or PATCHed first (v1.15), the node
lock, the handshake of v1.15 and the release after a failed bind.

usage: volcano_scheduler_test.py [unittest args]   (Python 3 standard library only)
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import volcano_scheduler as V  # noqa: E402
import scheduler_harness as H  # noqa: E402

# The worked example of docs/volcano.md: two A100-40GB, ten shares each.
A100 = "NVIDIA-NVIDIA A100-SXM4-40GB"
REGISTER = ("GPU-aaaa,10,40960,%s,true,hami-core:GPU-bbbb,10,40960,%s,true,hami-core:"
            % (A100, A100))


def pod(name, containers, annotations=None, ns="default"):
    return {"metadata": {"name": name, "namespace": ns, "uid": "uid-" + name,
                         "annotations": dict(annotations or {})},
            "spec": {"schedulerName": "volcano", "containers": [
                {"name": cname, "image": "cuda",
                 "resources": {"limits": {"volcano.sh/" + k: str(v) for k, v in lim.items()}}}
                for cname, lim in containers]},
            "status": {"phase": "Pending"}}


def gpu_pod12():
    """Volcano's gpu-pod12 example (docs/volcano.md has it, with its source): a GPU
    container, one without, and another GPU container."""
    return pod("gpu-pod12", [("ubuntu-container", {"vgpu-number": 2, "vgpu-memory": 2000}),
                             ("ubuntu-container0", {}),
                             ("ubuntu-container1", {"vgpu-number": 2, "vgpu-memory": 3000})])


def cards():
    c, mode = V.decode_node_devices(REGISTER)
    assert mode == "hami-core"
    return c


def place(p, cs=None, policy=""):
    return V.encode_pod_devices(V.check_node(p, cs if cs is not None else cards(), "hami-core",
                                             policy)[0])


class Decode(unittest.TestCase):
    def test_worked_example(self):
        c, mode = V.decode_node_devices(REGISTER)
        self.assertEqual(mode, "hami-core")
        self.assertEqual([(d["index"], d["uuid"], d["number"], d["memory"], d["type"],
                           d["health"]) for d in c],
                         [(0, "GPU-aaaa", 10, 40960, A100, True),
                          (1, "GPU-bbbb", 10, 40960, A100, True)])

    def test_short_entry_rejects_the_node(self):
        """One entry of five fields: decodeNodeDevices returns nil for the whole node."""
        bad = REGISTER.replace(",true,hami-core:GPU-bbbb", ",true:GPU-bbbb")
        self.assertEqual(V.decode_node_devices(bad), (None, ""))

    def test_no_colon_is_no_node(self):
        self.assertEqual(V.decode_node_devices(REGISTER.rstrip(":").replace(":", ";")),
                         (None, ""))

    def test_index_is_the_position_and_numbers_default_to_zero(self):
        c, mode = V.decode_node_devices(":GPU-x,ten,4096,NVIDIA-T4,false,mig:")
        self.assertEqual(mode, "mig")
        self.assertEqual((c[0]["index"], c[0]["number"], c[0]["memory"], c[0]["health"]),
                         (1, 0, 4096, False))

    def test_pod_devices_round_trip(self):
        text = "GPU-bbbb,NVIDIA,2000,0:GPU-aaaa,NVIDIA,2000,0:;GPU-bbbb,NVIDIA,3000,30:"
        self.assertEqual(V.encode_pod_devices(V.decode_pod_devices(text)), text)
        self.assertEqual(V.decode_pod_devices("GPU-a,NVIDIA,x,1:GPU-b,NVIDIA,5,1:"),
                         [[{"uuid": "GPU-b", "type": "NVIDIA", "mem": 5, "cores": 1}]])


class Fit(unittest.TestCase):
    def test_default_order_is_highest_index_first(self):
        p = pod("p", [("main", {"vgpu-number": 1, "vgpu-memory": 3000, "vgpu-cores": 30})])
        self.assertEqual(place(p), "GPU-bbbb,NVIDIA,3000,30:")

    def test_volcano_example_pod(self):
        """The non-GPU container gets no segment; each GPU container two cards."""
        self.assertEqual(place(gpu_pod12()),
                         "GPU-bbbb,NVIDIA,2000,0:GPU-aaaa,NVIDIA,2000,0:;"
                         "GPU-bbbb,NVIDIA,3000,0:GPU-aaaa,NVIDIA,3000,0:")

    def test_policies(self):
        """Card 0 holds one pod of 10000 MiB: binpack goes there, spread and the default
        order to card 1; with the pod on card 1 instead, spread goes to card 0."""
        p = pod("p", [("main", {"vgpu-memory": 1000})])
        for used, expect in ((0, {"binpack": "GPU-aaaa", "spread": "GPU-bbbb",
                                  "": "GPU-bbbb"}),
                             (1, {"binpack": "GPU-bbbb", "spread": "GPU-aaaa",
                                  "": "GPU-bbbb"})):
            for policy, uuid in expect.items():
                with self.subTest(used=used, policy=policy):
                    c = cards()
                    c[used].update(used_num=1, used_mem=10000, used_core=0)
                    self.assertEqual(place(p, c, policy), "%s,NVIDIA,1000,0:" % uuid)

    def test_binpack_score(self):
        c = cards()
        c[0].update(used_num=1, used_mem=10240)
        p = pod("p", [("main", {"vgpu-memory": 10240})])
        _, score = V.check_node(p, c, "hami-core", "binpack")
        self.assertAlmostEqual(score, 50.0)  # (10240 + 10240) / 40960

    def test_request_rules(self):
        cases = [({"vgpu-memory": 1000}, "GPU-bbbb,NVIDIA,1000,0:"),            # memory: 1 card
                 ({"vgpu-number": 1}, "GPU-bbbb,NVIDIA,40960,0:"),            # whole card
                 ({"vgpu-number": 1, "vgpu-memory-percentage": 50}, "GPU-bbbb,NVIDIA,20480,0:")]
        for lim, expect in cases:
            with self.subTest(limits=lim):
                self.assertEqual(place(pod("p", [("main", lim)])), expect)

    def test_cores_rules(self):
        """A 100-core request needs an empty card; a 0-core one cannot join a card at 100;
        cores past 100 do not fit."""
        c = cards()
        c[1].update(used_num=1, used_mem=100, used_core=10)
        self.assertEqual(place(pod("p", [("m", {"vgpu-memory": 10, "vgpu-cores": 100})]), c),
                         "GPU-aaaa,NVIDIA,10,100:")
        c = cards()
        c[1].update(used_num=1, used_mem=100, used_core=100)
        self.assertEqual(place(pod("p", [("m", {"vgpu-memory": 10})]), c),
                         "GPU-aaaa,NVIDIA,10,0:")
        c = cards()
        for d in c:
            d.update(used_num=1, used_core=80)
        with self.assertRaisesRegex(V.Unschedulable, "not enough gpu fitted"):
            place(pod("p", [("m", {"vgpu-memory": 10, "vgpu-cores": 30})]), c)

    def test_count_and_memory_and_number(self):
        with self.assertRaisesRegex(V.Unschedulable, "no enough gpu cards"):
            place(pod("p", [("m", {"vgpu-number": 3, "vgpu-memory": 10})]))
        with self.assertRaisesRegex(V.Unschedulable, "not enough gpu fitted"):
            place(pod("p", [("m", {"vgpu-memory": 40961})]))
        c = cards()
        c[1]["used_num"] = 10
        self.assertEqual(place(pod("p", [("m", {"vgpu-memory": 1})]), c), "GPU-aaaa,NVIDIA,1,0:")

    def test_gpu_type_and_mode(self):
        p = pod("p", [("m", {"vgpu-memory": 10})], {"nvidia.com/use-gputype": "H100,V100"})
        with self.assertRaises(V.Unschedulable):
            place(p)
        p = pod("p", [("m", {"vgpu-memory": 10})], {"nvidia.com/use-gputype": "T4,a100"})
        self.assertEqual(place(p), "GPU-bbbb,NVIDIA,10,0:")
        p = pod("p", [("m", {"vgpu-memory": 10})], {"nvidia.com/nouse-gputype": "A100"})
        with self.assertRaises(V.Unschedulable):
            place(p)
        p = pod("p", [("m", {"vgpu-memory": 10})], {"volcano.sh/vgpu-mode": "mig"})
        with self.assertRaisesRegex(V.Unschedulable, "sharing mode mig"):
            place(p)

    def test_a_pod_is_charged_once_per_card(self):
        """AddPod returns early for a pod already in the card's map: two segments of one
        pod on one card charge it once (what Volcano rebuilds after a restart)."""
        c = cards()
        p = pod("held", [], {"volcano.sh/vgpu-ids-new":
                             "GPU-bbbb,NVIDIA,1000,10:;GPU-bbbb,NVIDIA,2000,20:GPU-aaaa,NVIDIA,5,5:"})
        V.charge(c, p)
        self.assertEqual((c[1]["used_num"], c[1]["used_mem"], c[1]["used_core"]), (1, 1000, 10))
        self.assertEqual((c[0]["used_num"], c[0]["used_mem"], c[0]["used_core"]), (1, 5, 5))

    def test_containers_of_one_pod_see_each_other(self):
        """TryAddPod charges the card at once: the second container of a pod of two 25-core
        containers lands where the first left room (default order: card 1, then card 1)."""
        p = pod("p", [("a", {"vgpu-memory": 30000, "vgpu-cores": 25}),
                      ("b", {"vgpu-memory": 30000, "vgpu-cores": 25})])
        self.assertEqual(place(p), "GPU-bbbb,NVIDIA,30000,25:;GPU-aaaa,NVIDIA,30000,25:")


NODE = {"metadata": {"name": "node1", "labels": {"kubernetes.io/hostname": "node1"},
                     "annotations": {V.REGISTER: REGISTER,
                                     V.HANDSHAKE: "Reported 2026-11-29 03:00:00"}},
        "status": {"allocatable": {"volcano.sh/vgpu-number": "20",
                                   "volcano.sh/vgpu-memory": "81920",
                                   "volcano.sh/vgpu-cores": "200"}}}


class Wire(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-volcano-")

    def tearDown(self):
        if getattr(self, "proc", None):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, nodes, pods):
        fixture = os.path.join(self.dir, "fixture.json")
        with open(fixture, "w") as f:
            json.dump({"nodes": nodes, "pods": pods}, f)
        port_file = os.path.join(self.dir, "port")
        self.proc = subprocess.Popen(["/usr/bin/python3", H.API_SERVER, "--port", "0",
                                      "--port-file", port_file, "--fixture", fixture],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = H.wait_port_file(port_file, self.proc, timeout=120)
        self.api = V.Api("http://127.0.0.1:%d" % port)
        return self.api

    def get(self, path):
        return self.api.ok("GET", path)

    def test_head_writes_the_decision_on_the_binding(self):
        api = self.start([NODE], [gpu_pod12()])
        s = V.Scheduler(api, "head", clock=lambda: 1764385200)
        before = int(self.get("/api/v1/namespaces/default/pods/gpu-pod12")["metadata"]
                     ["resourceVersion"])
        node, ann = s.schedule("default", "gpu-pod12")
        self.assertEqual(node, "node1")
        got = self.get("/api/v1/namespaces/default/pods/gpu-pod12")
        self.assertEqual(got["spec"]["nodeName"], "node1")
        a = got["metadata"]["annotations"]
        self.assertEqual(a[V.IDS_NEW], "GPU-bbbb,NVIDIA,2000,0:GPU-aaaa,NVIDIA,2000,0:;"
                         "GPU-bbbb,NVIDIA,3000,0:GPU-aaaa,NVIDIA,3000,0:")
        self.assertEqual(a[V.TO_ALLOCATE], a[V.IDS_NEW])
        self.assertEqual((a[V.VGPU_NODE], a[V.BIND_PHASE], a[V.VGPU_TIME], a[V.BIND_TIME]),
                         ("node1", "allocating", "1764385200", "1764385200"))
        # One write in all (the binding): no PATCH before it, nothing on the node.
        self.assertEqual(int(got["metadata"]["resourceVersion"]) - before, 1)

    def test_head_needs_the_three_allocatable_resources(self):
        n = copy.deepcopy(NODE)
        del n["status"]["allocatable"]["volcano.sh/vgpu-cores"]
        api = self.start([n], [gpu_pod12()])
        with self.assertRaisesRegex(V.Unschedulable, "no vGPU node"):
            V.Scheduler(api, "head").schedule("default", "gpu-pod12")

    def test_v115_patches_then_binds_and_handshakes(self):
        api = self.start([NODE], [pod("p", [("m", {"vgpu-memory": 3000, "vgpu-cores": 30})])])
        s = V.Scheduler(api, "v1.15")
        before = int(self.get("/api/v1/namespaces/default/pods/p")["metadata"]["resourceVersion"])
        node, _ = s.schedule("default", "p")
        got = self.get("/api/v1/namespaces/default/pods/p")
        self.assertEqual(got["metadata"]["annotations"][V.IDS_NEW], "GPU-bbbb,NVIDIA,3000,30:")
        self.assertEqual(got["spec"]["nodeName"], "node1")
        hs = self.get("/api/v1/nodes/node1")["metadata"]["annotations"][V.HANDSHAKE]
        self.assertTrue(hs.startswith("Requesting_"), hs)
        # Three writes: the node's handshake, the pod's PATCH, the binding.
        self.assertEqual(int(got["metadata"]["resourceVersion"]) - before, 3)

    def test_v115_ignores_a_node_that_stopped_answering(self):
        n = copy.deepcopy(NODE)
        n["metadata"]["annotations"][V.HANDSHAKE] = "Requesting_" + V._stamp(time.time() - 120)
        api = self.start([n], [pod("p", [("m", {"vgpu-memory": 10})])])
        with self.assertRaises(V.Unschedulable):
            V.Scheduler(api, "v1.15").schedule("default", "p")
        hs = self.get("/api/v1/nodes/node1")["metadata"]["annotations"][V.HANDSHAKE]
        self.assertTrue(hs.startswith("Deleted_"), hs)
        for gone in (None, "Deleted_2026.11.29 03:00:00"):
            n = copy.deepcopy(NODE)
            if gone is None:
                del n["metadata"]["annotations"][V.HANDSHAKE]
            else:
                n["metadata"]["annotations"][V.HANDSHAKE] = gone
            self.tearDown()
            self.setUp()
            api = self.start([n], [pod("p", [("m", {"vgpu-memory": 10})])])
            with self.subTest(handshake=gone), self.assertRaises(V.Unschedulable):
                V.Scheduler(api, "v1.15").schedule("default", "p")

    def test_usage_is_rebuilt_from_the_pods(self):
        """A gang of four 10 GiB / 25-core pods on the two cards: default order puts each
        on card 1 until it holds 40960 MiB (four would need exactly that), binpack too."""
        pods = [pod("w%d" % i, [("m", {"vgpu-memory": 10240, "vgpu-cores": 25})])
                for i in range(5)]
        api = self.start([NODE], pods)
        s = V.Scheduler(api, "head", policy="spread")
        got = [s.schedule("default", "w%d" % i)[1][V.IDS_NEW].split(",")[0] for i in range(4)]
        self.assertEqual(got, ["GPU-aaaa", "GPU-bbbb", "GPU-aaaa", "GPU-bbbb"])
        # Each card now holds 20480 MiB and 50 cores: a fifth fits, a card's cores are 75.
        s.schedule("default", "w4")
        c, _ = s.cards(self.get("/api/v1/nodes/node1"),
                       self.get("/api/v1/pods")["items"])
        self.assertEqual(sorted((d["used_mem"], d["used_core"], d["used_num"]) for d in c),
                         [(20480, 50, 2), (30720, 75, 3)])

    def test_node_lock_and_release_on_failure(self):
        p = pod("p", [("m", {"vgpu-memory": 10})])
        api = self.start([NODE], [p, pod("q", [("m", {"vgpu-memory": 10})])])
        s = V.Scheduler(api, "head", node_lock=True)
        s.schedule("default", "p")
        lock = self.get("/api/v1/nodes/node1")["metadata"]["annotations"].get(V.NODE_LOCK)
        self.assertRegex(lock or "", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        # Locked (the device plugin has not released it): q is refused, nothing left on it.
        with self.assertRaisesRegex(V.Unschedulable, "node node1 is locked"):
            s.schedule("default", "q")
        q = self.get("/api/v1/namespaces/default/pods/q")
        self.assertFalse(set(q["metadata"].get("annotations") or {}) & set(V.DECISION_KEYS))
        self.assertNotIn("nodeName", q["spec"])

    def test_failed_bind_releases(self):
        """A v1.15 placement whose Binding fails (the pod was bound meanwhile): the
        annotations it patched and the lock it took are removed."""
        p = pod("p", [("m", {"vgpu-memory": 10})])
        api = self.start([NODE], [p])
        s = V.Scheduler(api, "v1.15", node_lock=True)
        node = self.get("/api/v1/nodes/node1")
        got = self.get("/api/v1/namespaces/default/pods/p")
        api.ok("POST", "/api/v1/namespaces/default/pods/p/binding",
               {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "elsewhere"}})
        devs, _ = V.check_node(got, cards(), "hami-core")
        with self.assertRaisesRegex(V.Unschedulable, "409"):
            s.bind(got, node, devs)
        after = self.get("/api/v1/namespaces/default/pods/p")
        self.assertFalse(set(after["metadata"].get("annotations") or {}) & set(V.DECISION_KEYS))
        self.assertNotIn(V.NODE_LOCK, self.get("/api/v1/nodes/node1")["metadata"]
                         .get("annotations") or {})

    def test_success_is_not_released(self):
        p = pod("p", [("m", {"vgpu-memory": 10})], {V.BIND_PHASE: "success",
                                                    V.IDS_NEW: "GPU-bbbb,NVIDIA,10,0:"})
        api = self.start([NODE], [p])
        V.Scheduler(api).release("default", "p")
        self.assertEqual(self.get("/api/v1/namespaces/default/pods/p")["metadata"]
                         ["annotations"][V.BIND_PHASE], "success")


if __name__ == "__main__":
    unittest.main()
