#!/usr/bin/env python3
"""The test API server's resource.k8s.io/v1 side (tests/kube_api_server.py): ResourceSlices,
DeviceClasses and ResourceClaims served as kube-apiserver serves them, so vgpu's DRA driver
can be tested against it.

usage: dra_api_test.py [unittest args]     (Debian's python3, standard library only)
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "kube_api_server.py")
BASE = "/apis/resource.k8s.io/v1"


def start_server(*extra):
    tmp = tempfile.mkdtemp(prefix="vgpu-dra-api-")
    port_file = os.path.join(tmp, "port")
    proc = subprocess.Popen([sys.executable, SERVER, "--port", "0", "--port-file", port_file,
                             "--bookmark-interval", "0.2"] + list(extra),
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(port_file):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("test API server did not start")
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


class Api:
    def __init__(self, port, token=None):
        self.port, self.token = port, token

    def call(self, method, path, body=None, ctype="application/json"):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Content-Type": ctype}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = json.loads(resp.read() or b"null")
        conn.close()
        return resp.status, payload


def slice_obj(name, node="node-1", generation=1, devices=None, **spec):
    body = {"metadata": {"name": name},
            "spec": {"driver": "gpu.vgpu.io", "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": devices if devices is not None else [gpu_device("gpu-0")]}}
    body["spec"].update(spec)
    return body


def gpu_device(name, **extra):
    dev = {"name": name,
           "attributes": {"uuid": {"string": "GPU-0"}, "index": {"int": 0},
                          "driverVersion": {"version": "550.54.15"}},
           "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}}
    dev.update(extra)
    return dev


class ResourceSliceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, port = start_server()
        cls.api = Api(port)

    @classmethod
    def tearDownClass(cls):
        cls.proc.kill()
        cls.proc.wait()

    def test_create_get_list_with_field_selector(self):
        code, created = self.api.call("POST", BASE + "/resourceslices", slice_obj("list-a"))
        self.assertEqual(code, 201, created)
        self.assertEqual(created["apiVersion"], "resource.k8s.io/v1")
        self.assertEqual(created["kind"], "ResourceSlice")
        self.assertEqual(created["metadata"]["generation"], 1)
        self.assertTrue(created["metadata"]["uid"])
        code, _ = self.api.call("POST", BASE + "/resourceslices",
                                slice_obj("list-b", node="node-2"))
        self.assertEqual(code, 201)
        code, got = self.api.call("GET", BASE + "/resourceslices/list-a")
        self.assertEqual((code, got["spec"]["nodeName"]), (200, "node-1"))
        code, listed = self.api.call("GET", BASE + "/resourceslices?fieldSelector="
                                     "spec.nodeName%3Dnode-2")
        self.assertEqual(code, 200)
        self.assertEqual(listed["kind"], "ResourceSliceList")
        self.assertEqual(listed["apiVersion"], "resource.k8s.io/v1")
        self.assertEqual([i["metadata"]["name"] for i in listed["items"]], ["list-b"])
        code, listed = self.api.call("GET", BASE + "/resourceslices?fieldSelector="
                                     "spec.driver%3Dgpu.vgpu.io&limit=1")
        self.assertEqual(len(listed["items"]), 1)
        self.assertIn("continue", listed["metadata"])

    def test_generate_name(self):
        body = slice_obj("")
        body["metadata"] = {"generateName": "node-1-gpu.vgpu.io-"}
        code, created = self.api.call("POST", BASE + "/resourceslices", body)
        self.assertEqual(code, 201, created)
        name = created["metadata"]["name"]
        self.assertTrue(name.startswith("node-1-gpu.vgpu.io-") and len(name) == 24, name)

    def test_create_twice_is_already_exists(self):
        self.assertEqual(self.api.call("POST", BASE + "/resourceslices",
                                       slice_obj("twice"))[0], 201)
        code, status = self.api.call("POST", BASE + "/resourceslices", slice_obj("twice"))
        self.assertEqual((code, status["reason"]), (409, "AlreadyExists"))
        self.assertIn('resourceslices.resource.k8s.io "twice" already exists', status["message"])

    def test_update_with_stale_resource_version_is_conflict(self):
        code, created = self.api.call("POST", BASE + "/resourceslices", slice_obj("upd"))
        self.assertEqual(code, 201)
        first_rv = created["metadata"]["resourceVersion"]
        created["spec"]["pool"]["generation"] = 2
        code, updated = self.api.call("PUT", BASE + "/resourceslices/upd", created)
        self.assertEqual(code, 200, updated)
        self.assertNotEqual(updated["metadata"]["resourceVersion"], first_rv)
        self.assertEqual(updated["metadata"]["generation"], 2)
        self.assertEqual(updated["metadata"]["uid"], created["metadata"]["uid"])
        # A writer still holding the first version loses, and nothing is written.
        stale = slice_obj("upd", generation=7)
        stale["metadata"]["resourceVersion"] = first_rv
        code, status = self.api.call("PUT", BASE + "/resourceslices/upd", stale)
        self.assertEqual((code, status["reason"]), (409, "Conflict"))
        self.assertIn("the object has been modified", status["message"])
        code, got = self.api.call("GET", BASE + "/resourceslices/upd")
        self.assertEqual(got["spec"]["pool"]["generation"], 2)
        # Without a resourceVersion the update is unconditional, as for kube-apiserver.
        code, got = self.api.call("PUT", BASE + "/resourceslices/upd", slice_obj("upd", generation=3))
        self.assertEqual((code, got["spec"]["pool"]["generation"]), (200, 3))

    def test_update_errors(self):
        self.assertEqual(self.api.call("POST", BASE + "/resourceslices",
                                       slice_obj("upd-err"))[0], 201)
        code, status = self.api.call("PUT", BASE + "/resourceslices/upd-err", slice_obj("other"))
        self.assertEqual(code, 400)
        self.assertIn("does not match the name on the URL", status["message"])
        code, status = self.api.call("PUT", BASE + "/resourceslices/missing", slice_obj("missing"))
        self.assertEqual((code, status["reason"]), (404, "NotFound"))
        code, status = self.api.call("PUT", BASE + "/resourceslices/upd-err",
                                     slice_obj("upd-err", driver="other.example.com"))
        self.assertEqual(code, 422)
        self.assertIn("spec.driver: Invalid value: field is immutable", status["message"])
        code, status = self.api.call("PUT", BASE + "/resourceslices/upd-err",
                                     slice_obj("upd-err", node="node-9"))
        self.assertEqual(code, 422)

    def test_validation_of_api_limits(self):
        cases = {
            "too many devices": (slice_obj("v1", devices=[gpu_device("gpu-%d" % i)
                                                          for i in range(129)]),
                                 "spec.devices: Too many: 129: must have at most 128 items"),
            "device name not a DNS label": (slice_obj("v2", devices=[gpu_device("GPU_0")]),
                                            "spec.devices[0].name"),
            "duplicate device": (slice_obj("v3", devices=[gpu_device("a"), gpu_device("a")]),
                                 "Duplicate value"),
            "two typed values": (slice_obj("v4", devices=[gpu_device(
                "a", attributes={"x": {"int": 1, "string": "1"}})]),
                "exactly one value must be specified"),
            "string too long": (slice_obj("v5", devices=[gpu_device(
                "a", attributes={"x": {"string": "y" * 65}})]), "attributes[x].string"),
            "version not semver": (slice_obj("v6", devices=[gpu_device(
                "a", attributes={"driverVersion": {"version": "550.54"}})]),
                "attributes[driverVersion].version"),
            "attribute name": (slice_obj("v7", devices=[gpu_device(
                "a", attributes={"9lives": {"int": 1}})]), "C identifier"),
            "33 attributes and capacities": (slice_obj("v8", devices=[gpu_device(
                "a", attributes={"a%d" % i: {"int": i} for i in range(31)})]),
                "at most 32 attributes and capacities"),
            "capacity not a quantity": (slice_obj("v9", devices=[gpu_device(
                "a", capacity={"memory": {"value": "lots"}})]), "capacity[memory].value"),
            "request policy without multiple allocations": (slice_obj("v10", devices=[gpu_device(
                "a", capacity={"memory": {"value": "1Gi", "requestPolicy": {
                    "default": "1Gi", "validRange": {"min": "256Mi"}}}})]),
                "only for devices with allowMultipleAllocations"),
            "no node": (slice_obj("v11", nodeName=None), "exactly one of `nodeName`"),
            "two nodes": (slice_obj("v12", allNodes=True), "exactly one of `nodeName`"),
            "slice count": (slice_obj("v13", pool={"name": "node-1", "generation": 1,
                                                   "resourceSliceCount": 0}),
                            "spec.pool.resourceSliceCount"),
            "driver name": (slice_obj("v14", driver="GPU.vgpu.io"), "spec.driver"),
            "64 devices with taints": (slice_obj("v15", devices=[gpu_device(
                "g%d" % i, taints=[{"key": "k", "effect": "NoSchedule"}]) for i in range(65)]),
                "at most 64 items"),
        }
        for what, (body, text) in cases.items():
            with self.subTest(what):
                code, status = self.api.call("POST", BASE + "/resourceslices", body)
                self.assertEqual((code, status.get("reason")), (422, "Invalid"), status)
                self.assertIn(text, status["message"])
        # The same limits hold on a consumable-capacity device written within them.
        dev = gpu_device("a", allowMultipleAllocations=True, capacity={
            "memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi", "validRange": {
                "min": "256Mi", "step": "256Mi"}}},
            "cores": {"value": "100", "requestPolicy": {"default": "1", "validRange": {
                "min": "1", "step": "1"}}}},
            attributes={"a%d" % i: {"int": i} for i in range(30)})
        code, status = self.api.call("POST", BASE + "/resourceslices",
                                     slice_obj("valid", devices=[dev] + [
                                         gpu_device("gpu-%d" % i) for i in range(127)]))
        self.assertEqual(code, 201, status)

    def test_delete_with_preconditions(self):
        code, created = self.api.call("POST", BASE + "/resourceslices", slice_obj("del"))
        code, status = self.api.call("DELETE", BASE + "/resourceslices/del",
                                     {"preconditions": {"resourceVersion": "1"}})
        self.assertEqual((code, status["reason"]), (409, "Conflict"))
        code, _ = self.api.call("DELETE", BASE + "/resourceslices/del", {"preconditions": {
            "resourceVersion": created["metadata"]["resourceVersion"]}})
        self.assertEqual(code, 200)
        self.assertEqual(self.api.call("GET", BASE + "/resourceslices/del")[0], 404)

    def test_wrong_paths(self):
        self.assertEqual(self.api.call("GET", BASE + "/namespaces/default/resourceslices")[0], 404)
        self.assertEqual(self.api.call("GET", BASE + "/resourceclaims/x")[0], 404)
        self.assertEqual(self.api.call("GET", BASE + "/widgets")[0], 404)
        self.assertEqual(self.api.call("GET", "/apis/resource.k8s.io/v1beta9/resourceslices")[0],
                         404)
        code, status = self.api.call("PATCH", BASE + "/resourceslices/x", {}, ctype="text/plain")
        self.assertEqual(code, 415)
        code, status = self.api.call("POST", BASE + "/resourceslices", [1, 2])
        self.assertEqual(code, 400)


class WatchTest(unittest.TestCase):
    def setUp(self):
        self.proc, port = start_server()
        self.api = Api(port)

    def tearDown(self):
        self.proc.kill()
        self.proc.wait()

    def watch(self, path, count):
        """The first `count` events of a watch on path, read in a thread."""
        conn = http.client.HTTPConnection("127.0.0.1", self.api.port, timeout=30)
        conn.request("GET", path)
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        events = []
        done = threading.Event()

        def reader():
            while len(events) < count:
                line = resp.fp.readline()  # chunk size line
                if not line:
                    break
                size = int(line.strip() or b"0", 16)
                if size == 0:
                    break
                data = resp.fp.read(size)
                resp.fp.readline()
                for text in data.splitlines():
                    ev = json.loads(text)
                    if ev["type"] != "BOOKMARK":
                        events.append(ev)
            done.set()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        return events, done, conn

    def test_watch_slices_and_claims_from_a_list_version(self):
        code, listed = self.api.call("GET", BASE + "/resourceslices")
        rv = listed["metadata"]["resourceVersion"]
        events, done, conn = self.watch(BASE + "/resourceslices?watch=1&resourceVersion=%s"
                                        "&fieldSelector=spec.nodeName%%3Dnode-1" % rv, 3)
        claims, claims_done, conn2 = self.watch(
            BASE + "/namespaces/ns1/resourceclaims?watch=1&resourceVersion=%s" % rv, 2)
        _, created = self.api.call("POST", BASE + "/resourceslices", slice_obj("w"))
        self.api.call("POST", BASE + "/resourceslices", slice_obj("w-other", node="node-2"))
        created["spec"]["pool"]["generation"] = 2
        self.assertEqual(self.api.call("PUT", BASE + "/resourceslices/w", created)[0], 200)
        self.assertEqual(self.api.call("DELETE", BASE + "/resourceslices/w")[0], 200)
        claim = {"metadata": {"name": "c1"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu.io"}}]}}}
        self.assertEqual(self.api.call("POST", BASE + "/namespaces/ns1/resourceclaims",
                                       claim)[0], 201)
        self.assertEqual(self.api.call("POST", BASE + "/namespaces/ns2/resourceclaims",
                                       claim)[0], 201)
        _, got = self.api.call("GET", BASE + "/namespaces/ns1/resourceclaims/c1")
        got["status"] = {"allocation": {"devices": {"results": []}}}
        self.assertEqual(self.api.call("PUT", BASE + "/namespaces/ns1/resourceclaims/c1/status",
                                       got)[0], 200)
        self.assertTrue(done.wait(20) and claims_done.wait(20))
        conn.close()
        conn2.close()
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in events],
                         [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")])
        self.assertEqual(events[1]["object"]["spec"]["pool"]["generation"], 2)
        self.assertEqual([(e["type"], e["object"]["metadata"]["namespace"]) for e in claims],
                         [("ADDED", "ns1"), ("MODIFIED", "ns1")])
        self.assertIn("allocation", claims[1]["object"]["status"])


class ResourceClaimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, port = start_server()
        cls.api = Api(port)

    @classmethod
    def tearDownClass(cls):
        cls.proc.kill()
        cls.proc.wait()

    def claim(self, name):
        return {"metadata": {"name": name}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu.io",
                                        "capacity": {"requests": {"memory": "10Gi"}}}}]}}}

    def test_status_is_written_only_through_the_status_subresource(self):
        code, created = self.api.call("POST", BASE + "/namespaces/team/resourceclaims",
                                      self.claim("c"))
        self.assertEqual(code, 201, created)
        self.assertEqual(created["metadata"]["namespace"], "team")
        allocated = dict(created, status={"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.vgpu.io", "pool": "node-1", "device": "gpu-0",
             "shareID": "7d1ac9f3-1a32-4bd4-9a36-2f0b2b5d8e11",
             "consumedCapacity": {"memory": "10Gi", "cores": "1"}}]}}})
        code, got = self.api.call("PUT", BASE + "/namespaces/team/resourceclaims/c", allocated)
        self.assertEqual(code, 200)
        self.assertNotIn("status", got)  # the main resource ignores status
        allocated["metadata"]["resourceVersion"] = got["metadata"]["resourceVersion"]
        code, got = self.api.call("PUT", BASE + "/namespaces/team/resourceclaims/c/status",
                                  allocated)
        self.assertEqual(code, 200, got)
        self.assertEqual(got["status"]["allocation"]["devices"]["results"][0]["shareID"],
                         "7d1ac9f3-1a32-4bd4-9a36-2f0b2b5d8e11")
        code, got = self.api.call("GET", BASE + "/namespaces/team/resourceclaims/c/status")
        self.assertEqual((code, got["metadata"]["name"]), (200, "c"))
        # The old version cannot overwrite the allocation.
        code, status = self.api.call("PUT", BASE + "/namespaces/team/resourceclaims/c/status",
                                     dict(allocated, status={}))
        self.assertEqual(code, 409)
        self.assertIn('resourceclaims.resource.k8s.io "c"', status["message"])

    def test_spec_is_immutable(self):
        code, created = self.api.call("POST", BASE + "/namespaces/team/resourceclaims",
                                      self.claim("imm"))
        created["spec"]["devices"]["requests"][0]["name"] = "other"
        code, status = self.api.call("PUT", BASE + "/namespaces/team/resourceclaims/imm", created)
        self.assertEqual(code, 422)
        self.assertIn("field is immutable", status["message"])

    def test_namespaces(self):
        self.assertEqual(self.api.call("POST", BASE + "/resourceclaims", self.claim("x"))[0], 404)
        body = self.claim("x")
        body["metadata"]["namespace"] = "elsewhere"
        self.assertEqual(self.api.call("POST", BASE + "/namespaces/team/resourceclaims",
                                       body)[0], 400)
        self.assertEqual(self.api.call("POST", BASE + "/namespaces/a/resourceclaims",
                                       self.claim("same"))[0], 201)
        self.assertEqual(self.api.call("POST", BASE + "/namespaces/b/resourceclaims",
                                       self.claim("same"))[0], 201)
        _, listed = self.api.call("GET", BASE + "/resourceclaims")
        names = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]]
        self.assertIn(("a", "same"), names)
        self.assertIn(("b", "same"), names)
        _, listed = self.api.call("GET", BASE + "/namespaces/a/resourceclaims")
        self.assertTrue(all(i["metadata"]["namespace"] == "a" for i in listed["items"]))

    def test_device_classes_and_templates(self):
        cls = {"metadata": {"name": "gpu.vgpu.io"}, "spec": {"selectors": [
            {"cel": {"expression": "device.driver == 'gpu.vgpu.io'"}}]}}
        code, created = self.api.call("POST", BASE + "/deviceclasses", cls)
        self.assertEqual((code, created["kind"]), (201, "DeviceClass"))
        self.assertEqual(self.api.call("GET", BASE + "/deviceclasses/gpu.vgpu.io")[0], 200)
        tmpl = {"metadata": {"name": "t"}, "spec": {"spec": self.claim("t")["spec"]}}
        code, created = self.api.call("POST", BASE + "/namespaces/team/resourceclaimtemplates",
                                      tmpl)
        self.assertEqual((code, created["kind"]), (201, "ResourceClaimTemplate"))
        self.assertEqual(self.api.call("DELETE", BASE + "/deviceclasses/gpu.vgpu.io")[0], 200)


def counters_slice(name, node="node-1", sets=None):
    """A slice holding only sharedCounters (KEP-4815: never with devices)."""
    body = slice_obj(name, node, devices=[])
    del body["spec"]["devices"]
    body["spec"]["sharedCounters"] = sets if sets is not None else [
        {"name": "gpu-0-counters", "counters": {
            "memory-slice-%d" % i: {"value": "1"} for i in range(8)}}]
    return body


def partition(name, start, size, counter_set="gpu-0-counters"):
    return {"name": name, "consumesCounters": [{"counterSet": counter_set, "counters": {
        "memory-slice-%d" % i: {"value": "1"} for i in range(start, start + size)}}]}


class Api136Test(unittest.TestCase):
    """What 1.36 adds and vgpu's driver uses: device taints (KEP-5055) and partitionable
    devices (KEP-4815) validated as kube-apiserver validates them, request tolerations,
    GET /version, and the allocator (POST /admin/allocate): first fit, taints honoured
    unless tolerated, shared counters never exceeded."""

    def setUp(self):
        self.proc, port = start_server()
        self.api = Api(port)

    def tearDown(self):
        self.proc.terminate()
        self.proc.wait(10)

    def put(self, body):
        return self.api.call("POST", BASE + "/resourceslices", body)

    def claim(self, name, requests):
        code, body = self.api.call("POST", BASE + "/namespaces/default/resourceclaims", {
            "metadata": {"name": name}, "spec": {"devices": {"requests": requests}}})
        self.assertEqual(code, 201, body)

    def allocate(self, name, **extra):
        code, body = self.api.call("POST", "/admin/allocate", dict(name=name, **extra))
        if code != 200:
            return code, body["message"]
        return code, [r["device"] for r in body["status"]["allocation"]["devices"]["results"]]

    def test_version(self):
        code, body = self.api.call("GET", "/version")
        self.assertEqual((code, body["major"], body["minor"]), (200, "1", "36"))
        proc, port = start_server("--k8s-version", "1.35")
        try:
            self.assertEqual(Api(port).call("GET", "/version")[1]["minor"], "35")
        finally:
            proc.terminate()
            proc.wait(10)

    def test_taint_validation(self):
        good = {"key": "gpu.vgpu.io/xid", "value": "79", "effect": "NoSchedule"}
        code, body = self.put(slice_obj("ok", devices=[gpu_device("gpu-0", taints=[good])]))
        self.assertEqual(code, 201, body)
        # The server sets timeAdded when empty.
        self.assertRegex(body["spec"]["devices"][0]["taints"][0]["timeAdded"],
                         r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        bad = {
            "effect PreferNoSchedule": (dict(good, effect="PreferNoSchedule"),
                                        "taints[0].effect: Unsupported value"),
            "no effect": ({"key": "a"}, "taints[0].effect: Required value"),
            "key not a label name": (dict(good, key="gpu.vgpu.io/-x"), "taints[0].key"),
            "value too long": (dict(good, value="v" * 64), "taints[0].value"),
            "timeAdded not RFC 3339": (dict(good, timeAdded="yesterday"),
                                       "taints[0].timeAdded"),
        }
        for i, (what, (taint, want)) in enumerate(sorted(bad.items())):
            with self.subTest(what):
                code, body = self.put(slice_obj("bad-%d" % i,
                                                devices=[gpu_device("gpu-0", taints=[taint])]))
                self.assertEqual(code, 422, body)
                self.assertIn(want, body["message"])
        # 16 taints per device; 17 are refused.
        many = [dict(good, key="k%d" % i) for i in range(17)]
        code, body = self.put(slice_obj("many", devices=[gpu_device("gpu-0", taints=many[:16])]))
        self.assertEqual(code, 201, body)
        code, body = self.put(slice_obj("toomany", devices=[gpu_device("gpu-0", taints=many)]))
        self.assertEqual(code, 422, body)
        self.assertIn("taints: Too many: 17: must have at most 16", body["message"])
        # 64 devices when one has a taint, 65 refused (128 without).
        devs = [gpu_device("gpu-%d" % i) for i in range(65)]
        code, body = self.put(slice_obj("plain65", devices=devs))
        self.assertEqual(code, 201, body)
        devs[0]["taints"] = [good]
        code, body = self.put(slice_obj("tainted65", devices=devs))
        self.assertEqual(code, 422, body)
        self.assertIn("spec.devices: Too many: 65: must have at most 64", body["message"])

    def test_counter_validation(self):
        code, body = self.put(counters_slice("counters"))
        self.assertEqual(code, 201, body)
        sets = [{"name": "s%d" % i, "counters": {"c": {"value": "1"}}} for i in range(9)]
        bad = {
            "9 counter sets": (counters_slice("b1", sets=sets),
                               "spec.sharedCounters: Too many: 9: must have at most 8"),
            "33 counters": (counters_slice("b2", sets=[{"name": "s", "counters": {
                "c%d" % i: {"value": "1"} for i in range(33)}}]),
                "counters: Too many: 33: must have at most 32"),
            "counter name not a DNS label": (counters_slice("b3", sets=[
                {"name": "s", "counters": {"Memory_Slice": {"value": "1"}}}]),
                "Invalid value: a lowercase RFC 1123 label"),
            "duplicate set": (counters_slice("b4", sets=[sets[0], sets[0]]),
                              "spec.sharedCounters[1].name: Duplicate value"),
            "devices and counters": (dict(counters_slice("b5"), spec=dict(
                counters_slice("b5")["spec"], devices=[gpu_device("gpu-0")])),
                "only one of `devices` and `sharedCounters`"),
            "3 consumptions": (slice_obj("b6", devices=[dict(
                partition("p", 0, 1), consumesCounters=partition("p", 0, 1)[
                    "consumesCounters"] * 3)]), "consumesCounters: Too many: 3"),
            "consumption not a quantity": (slice_obj("b7", devices=[{
                "name": "p", "consumesCounters": [{"counterSet": "gpu-0-counters",
                                                   "counters": {"m": {"value": "lots"}}}]}]),
                "a quantity is required"),
        }
        for what, (body_in, want) in sorted(bad.items()):
            with self.subTest(what):
                code, body = self.put(body_in)
                self.assertEqual(code, 422, body)
                self.assertIn(want, body["message"])

    def test_toleration_validation(self):
        bad = {
            "Exists with a value": ({"key": "k", "operator": "Exists", "value": "v"},
                                    "must be empty when operator is Exists"),
            "unknown operator": ({"key": "k", "operator": "In"}, "Unsupported value"),
            "empty key with Equal": ({"operator": "Equal"}, "an empty key needs Exists"),
            "bad effect": ({"key": "k", "operator": "Exists", "effect": "Evict"},
                           "effect: Unsupported value"),
        }
        for i, (what, (tol, want)) in enumerate(sorted(bad.items())):
            with self.subTest(what):
                code, body = self.api.call("POST", BASE + "/namespaces/default/resourceclaims", {
                    "metadata": {"name": "c%d" % i}, "spec": {"devices": {"requests": [{
                        "name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu.io",
                                                   "tolerations": [tol]}}]}}})
                self.assertEqual(code, 422, body)
                self.assertIn(want, body["message"])

    def test_allocator_taints(self):
        taint = {"key": "gpu.vgpu.io/xid", "value": "79", "effect": "NoSchedule"}
        info = {"key": "gpu.vgpu.io/unmonitored", "effect": "None"}
        code, body = self.put(slice_obj("s", devices=[
            gpu_device("gpu-0", taints=[taint]), gpu_device("gpu-1", taints=[info])]))
        self.assertEqual(code, 201, body)
        req = {"name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu.io"}}
        self.claim("a", [req])
        self.assertEqual(self.allocate("a"), (200, ["gpu-1"]))  # None does not repel
        self.claim("b", [req])
        code, why = self.allocate("b")
        self.assertEqual(code, 409)
        self.assertIn("0 fit", why)
        tols = {
            "other value": ([{"key": "gpu.vgpu.io/xid", "value": "48"}], False),
            "other effect": ([{"key": "gpu.vgpu.io/xid", "operator": "Exists",
                               "effect": "NoExecute"}], False),
            "equal value": ([{"key": "gpu.vgpu.io/xid", "value": "79"}], True),
            "empty key exists": ([{"operator": "Exists"}], True),
        }
        for i, (what, (tol, ok)) in enumerate(sorted(tols.items())):
            with self.subTest(what):
                self.claim("t%d" % i, [dict(req, exactly=dict(req["exactly"], tolerations=tol))])
                code, got = self.allocate("t%d" % i)
                self.assertEqual(code, 200 if ok else 409, got)
                if ok:
                    self.assertEqual(got, ["gpu-0"])
                    self.api.call("DELETE", BASE + "/namespaces/default/resourceclaims/t%d" % i)

    def test_allocator_counters(self):
        """Partitions of one GPU: the whole GPU consumes all 8 slices, 4-slice partitions
        at 0 and 4, 1-slice ones; first fit in listed order, counters never exceeded."""
        code, body = self.put(counters_slice("c"))
        self.assertEqual(code, 201, body)
        devs = [partition("p1-%d" % i, i, 1) for i in range(7)] + \
            [partition("p4-0", 0, 4), partition("p4-4", 4, 4), partition("whole", 0, 8)]
        code, body = self.put(slice_obj("d", devices=devs))
        self.assertEqual(code, 201, body)
        req = {"name": "gpu", "exactly": {"deviceClassName": "mig.vgpu.io"}}
        self.claim("four", [req])
        self.assertEqual(self.allocate("four", devices={"gpu": ["p4-4"]}), (200, ["p4-4"]))
        # The whole GPU overlaps it; so does a 1-slice partition in slices 4..7.
        self.claim("whole", [req])
        code, why = self.allocate("whole", devices={"gpu": ["whole"]})
        self.assertEqual(code, 409, why)
        self.claim("p15", [req])
        self.assertEqual(self.allocate("p15", devices={"gpu": ["p1-5"]})[0], 409)
        # First fit: four 1-slice claims take p1-0..p1-3; a fifth finds nothing free.
        for i in range(4):
            self.claim("one%d" % i, [req])
            self.assertEqual(self.allocate("one%d" % i), (200, ["p1-%d" % i]))
        self.claim("five", [req])
        self.assertEqual(self.allocate("five")[0], 409)
        # Freeing the 4-slice partition lets the 1-slice ones at 4.. be allocated.
        self.api.call("DELETE", BASE + "/namespaces/default/resourceclaims/four")
        self.assertEqual(self.allocate("five"), (200, ["p1-4"]))


class AuthzTest(unittest.TestCase):
    """--authz: the node plugin's ClusterRole allows slices and reading claims, no more."""

    @classmethod
    def setUpClass(cls):
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"tokens": {"plugin-token": "system:serviceaccount:vgpu:dra-plugin",
                                  "core-token": "core-only"},
                       "rules": {"system:serviceaccount:vgpu:dra-plugin": [
                           {"verbs": ["get", "list", "watch", "create", "update", "delete"],
                            "apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"]},
                           {"verbs": ["get"], "apiGroups": ["resource.k8s.io"],
                            "resources": ["resourceclaims"]}],
                           "core-only": [{"verbs": ["*"], "apiGroups": [""],
                                          "resources": ["*"]}]}}, f)
        cls.proc, port = start_server("--authz", path)
        cls.port = port
        os.unlink(path)  # read once at start-up

    @classmethod
    def tearDownClass(cls):
        cls.proc.kill()
        cls.proc.wait()

    def test_plugin_rules(self):
        plugin = Api(self.port, "plugin-token")
        code, created = plugin.call("POST", BASE + "/resourceslices", slice_obj("a"))
        self.assertEqual(code, 201, created)
        self.assertEqual(plugin.call("PUT", BASE + "/resourceslices/a", created)[0], 200)
        self.assertEqual(plugin.call("GET", BASE + "/resourceslices?watch=0")[0], 200)
        code, status = plugin.call("PUT", BASE + "/namespaces/ns/resourceclaims/c/status",
                                   {"metadata": {"name": "c"}})
        self.assertEqual(code, 403)
        self.assertEqual(status["message"],
                         'resourceclaims.resource.k8s.io "c" is forbidden: User '
                         '"system:serviceaccount:vgpu:dra-plugin" cannot update resource '
                         '"resourceclaims/status" in API group "resource.k8s.io" in the '
                         'namespace "ns"')
        self.assertEqual(plugin.call("GET", BASE + "/namespaces/ns/resourceclaims/c")[0], 404)
        self.assertEqual(plugin.call("GET", BASE + "/namespaces/ns/resourceclaims")[0], 403)
        self.assertEqual(plugin.call("POST", BASE + "/deviceclasses",
                                     {"metadata": {"name": "x"}})[0], 403)
        # The DRA rules do not open the core group, nor the core rules the DRA group.
        self.assertEqual(plugin.call("GET", "/api/v1/pods")[0], 403)
        core = Api(self.port, "core-token")
        self.assertEqual(core.call("GET", "/api/v1/pods")[0], 200)
        code, status = core.call("DELETE", BASE + "/resourceslices/a")
        self.assertEqual(code, 403)
        self.assertIn('in API group "resource.k8s.io" at the cluster scope', status["message"])
        self.assertEqual(Api(self.port).call("GET", BASE + "/resourceslices")[0], 401)


if __name__ == "__main__":
    unittest.main()
