#!/usr/bin/env python3
"""Live resize through the API (docs/scheduler.md "Live resize"): `vgpu resize` against
tests/kube_api_server.py and a real vgpu-scheduler.

usage: resize_test.py BUILD_DIR [unittest args]

One node with one 16000 MiB GPU; pod a (4096 MiB, 30 %) and pod b (8000 MiB, 30 %) run
on it, bound with vgpu's decisions. What a user would notice: the command's exit status
and words, the pod's decision (what the node applies), vgpu-scheduler's records (what it
charges after a restart), and that a refused resize changes none of them."""
import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scheduler_harness as H  # noqa: E402

BUILD = None
NODE, GPU = "node-a", "GPU-node-a-0"
RECORDS = "/api/v1/namespaces/vgpu-system/configmaps"
OTHERS = 8000 + 1000  # what pods b and waiting (bound, not started) hold on the GPU


def decision(mem, cores, gen=0):
    d = {"version": 1, "node": NODE, "time": int(time.time()) - 60,
         "containers": [{"name": "main", "gpus": [{"uuid": GPU, "memoryMiB": mem,
                                                   "cores": cores}]}]}
    if gen:
        d["generation"] = gen
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def running(name, mem, cores, ns="default", phase="Running", with_decision=True):
    pod = H.pod_object(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem),
                              "nvidia.com/gpucores": str(cores)},
                       annotations={"vgpu.io/decision": decision(mem, cores)}
                       if with_decision else {}, ns=ns)
    pod["metadata"]["uid"] = "uid-" + name
    pod["spec"]["nodeName"] = NODE
    pod["status"]["phase"] = phase
    return pod


class ResizeBase(unittest.TestCase):
    quotas = ()

    def setUp(self):
        pods = [running("a", 4096, 30), running("b", 8000, 30),
                running("waiting", 1000, 10, phase="Pending"),
                running("plain", 1000, 10, with_decision=False)]
        fixture_extra = {}
        self.cluster = H.Cluster(os.path.join(BUILD, "bin", "vgpu-scheduler"),
                                 [H.node_object(NODE, 1, mem_mib=16000, slots=4)], pods)
        self.addCleanup(self.stop)
        for q in self.quotas:
            status, body = self.cluster.apic.request(
                "POST", "/api/v1/namespaces/default/resourcequotas", q)
            self.assertIn(status, (200, 201), body)
        del fixture_extra
        self.cluster.wait_ready()
        # The bind-time records vgpu-scheduler writes for bound pods it finds without one.
        H.wait_for(lambda: {"vgpu-decision-uid-a", "vgpu-decision-uid-b"} <= self.records(),
                   "the pods' decision records")

    def stop(self):
        self.cluster.stop()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(self.cluster.log()[-6000:])

    def records(self):
        status, body = self.cluster.apic.request("GET", RECORDS)
        self.assertEqual(status, 200, body)
        return {cm["metadata"]["name"] for cm in body["items"]}

    def vgpu(self, *args):
        return subprocess.run([os.path.join(BUILD, "bin", "vgpu")] + list(args) +
                              ["--kubeconfig", self.cluster.kubeconfig,
                               "--request-timeout", "20"],
                              capture_output=True, text=True, timeout=60)

    def shown(self, name="a"):
        """(memoryMiB, cores, generation) of the pod's decision."""
        d = json.loads(self.cluster.get_pod(name)["metadata"]["annotations"]["vgpu.io/decision"])
        g = d["containers"][0]["gpus"][0]
        return g["memoryMiB"], g["cores"], d.get("generation", 0)

    def charged(self):
        """The scheduler's ledger: memory used on the GPU."""
        gpus = self.cluster.state(bound=True)["nodes"][NODE]
        return gpus[0]["memUsedMiB"]

    def assert_unchanged(self):
        self.assertEqual(self.shown(), (4096, 30, 0))
        self.assertEqual(self.charged(), 4096 + OTHERS)
        self.assertNotIn("vgpu-decision-uid-a-g1", self.records())


class ResizeTest(ResizeBase):
    def test_grow_and_lower(self):
        r = self.vgpu("resize", "a", "--gpumem", "6Gi", "--gpucores", "40")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("memory 4096 MiB -> 6144 MiB, compute 30% -> 40%", r.stdout)
        self.assertEqual(self.shown(), (6144, 40, 1))
        self.assertEqual(self.charged(), 6144 + OTHERS)
        # The record of generation 1 speaks for the pod; the bind's is gone.
        H.wait_for(lambda: "vgpu-decision-uid-a" not in self.records(), "the old record deleted")
        self.assertIn("vgpu-decision-uid-a-g1", self.records())
        # vgpu pods shows the effective limits (the spec still says 4096).
        pods = json.loads(self.vgpu("pods", "-o", "json").stdout)["pods"]
        a = [p for p in pods if p["name"] == "a"][0]
        self.assertEqual(a["decision"]["containers"][0]["gpus"][0]["memoryMiB"], 6144)
        self.assertEqual(a["decision"]["generation"], 1)
        self.assertRegex(self.vgpu("pods").stdout, r"\ba +Running \(resized\) +node-a +1 +6Gi +40%")
        # Lowering: recorded, and said to free nothing.
        r = self.vgpu("resize", "a", "--gpumem", "2048")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing is freed", r.stdout)
        self.assertEqual(self.shown(), (2048, 40, 2))
        self.assertEqual(self.charged(), 2048 + OTHERS)
        # The same again: nothing to do, said so, no new generation.
        r = self.vgpu("resize", "a", "--gpumem", "2048")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("unchanged", r.stdout)
        self.assertEqual(self.shown(), (2048, 40, 2))
        status, text = self.cluster.ext.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('vgpu_scheduler_resizes_total{result="done"} 3', text)
        self.assertIn('vgpu_scheduler_resizes_total{result="refused"} 0', text)

    def test_no_room_changes_nothing(self):
        r = self.vgpu("resize", "a", "--gpumem", "8000")  # 8000 + 9000 > 16000
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("refused", r.stderr)
        self.assertIn("no room", r.stderr)
        self.assert_unchanged()

    def test_bad_inputs(self):
        cases = [(["--gpumem", "-1"], "--gpumem '-1'"), (["--gpumem", "0"], "at least 1 MiB"),
                 (["--gpumem", "10Pi"], "--gpumem '10Pi'"), (["--gpumem", "4GiB"], "4Gi"),
                 (["--gpumem", "lots"], "--gpumem 'lots'"), (["--gpucores", "0"], "1..100"),
                 (["--gpucores", "101"], "1..100"), (["--gpucores", "50%"], "--gpucores"),
                 ([], "nothing to change"), (["-c", "Main", "--gpumem", "1Gi"], "-c 'Main'"),
                 (["-c", "side", "--gpumem", "1Gi"], "container side")]
        for args, want in cases:
            with self.subTest(args=args):
                r = self.vgpu("resize", "a", *args)
                self.assertEqual(r.returncode, 1, r.stdout)
                self.assertIn(want, r.stderr)
        self.assertNotIn("vgpu.io/resize", self.cluster.get_pod("a")["metadata"]["annotations"])
        self.assert_unchanged()

    def test_pods_that_cannot_be_resized(self):
        for pod, want in (("gone", "not found"), ("plain", "not vgpu's"),
                          ("waiting", "is Pending")):
            with self.subTest(pod=pod):
                r = self.vgpu("resize", pod, "--gpumem", "1Gi")
                self.assertEqual(r.returncode, 1, r.stdout)
                self.assertIn(want, r.stderr)
        # A compute share that cannot change live is refused by the scheduler, with why.
        r = self.vgpu("resize", "a", "--gpucores", "100")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("restart the pod", r.stderr)
        self.assert_unchanged()

    def test_automation_by_annotation(self):
        """The annotation alone, as automation writes it; a malformed one is answered."""
        def ask(value):
            status, body = self.cluster.apic.request(
                "PATCH", "/api/v1/namespaces/default/pods/a",
                {"metadata": {"annotations": {"vgpu.io/resize": value}}},
                ctype="application/merge-patch+json")
            self.assertEqual(status, 200, body)

        def answer(rid):
            def get():
                st = self.cluster.get_pod("a")["metadata"]["annotations"].get(
                    "vgpu.io/resize-status")
                return st and json.loads(st)["id"] == rid and json.loads(st)
            return H.wait_for(get, "the answer to " + rid)
        ask('{"version":1,"id":"bad-1","memoryMiB":-5}')
        st = answer("bad-1")
        self.assertEqual(st["state"], "refused")
        self.assertIn("memoryMiB", st["reason"])
        self.assert_unchanged()
        ask('{"version":1,"id":"auto-1","container":"main","memoryMiB":5000}')
        st = answer("auto-1")
        self.assertEqual(st["state"], "done", st)
        # The answer before it stays readable for a client that looks late.
        self.assertEqual(st["earlier"], ["bad-1 refused 0"])
        self.assertEqual(self.shown(), (5000, 30, 1))

    def test_two_resizes_racing(self):
        out = {}

        def one(size):
            out[size] = self.vgpu("resize", "a", "--gpumem", str(size))
        threads = [threading.Thread(target=one, args=(s,)) for s in (5000, 6000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done = [s for s, r in out.items() if r.returncode == 0]
        self.assertGreaterEqual(len(done), 1, out)
        for s, r in out.items():
            if r.returncode != 0:
                self.assertRegex(r.stderr, "another resize|raced|replaced", r.stderr)
        # What the pod shows is what the scheduler charges, and one of the asked sizes.
        mem, _, gen = self.shown()
        self.assertIn(mem, done)
        self.assertEqual(gen, len(done))
        self.assertEqual(self.charged(), mem + OTHERS)


class QuotaTest(ResizeBase):
    quotas = ({"metadata": {"name": "gpu-mem", "namespace": "default"},
               "spec": {"hard": {"requests.nvidia.com/gpumem": "14000"}},
               "status": {"hard": {"requests.nvidia.com/gpumem": "14000"},
                          "used": {"requests.nvidia.com/gpumem": "12096"}}},)

    def test_quota_holds_after_resizes(self):
        r = self.vgpu("resize", "a", "--gpumem", "6000")  # 12096 + 1904 = 14000: fits
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.vgpu("resize", "a", "--gpumem", "6001")  # one MiB past the quota
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("namespace quota gpu-mem", r.stderr)
        self.assertEqual(self.shown(), (6000, 30, 1))
        # Lowering always keeps a quota true.
        r = self.vgpu("resize", "a", "--gpumem", "3000")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unrecorded_lowering_frees_no_quota(self):
        """A lowering whose record the API refuses is refused and changes nothing: the
        namespace's quota still counts what the pod holds, so another pod cannot take
        the room the refused lowering would have freed."""
        status, body = self.cluster.apic.request(
            "POST", "/admin/faults", {"fail_next": 1, "fail_status": 500,
                                      "match": "POST " + RECORDS})
        self.assertEqual(status, 200, body)
        r = self.vgpu("resize", "a", "--gpumem", "1000")
        self.assertEqual(r.returncode, 1, (r.stdout, r.stderr))
        self.assertIn("could not be recorded", r.stderr)
        self.assert_unchanged()
        r = self.vgpu("resize", "b", "--gpumem", "9905")  # 12096 + 1905: one MiB past
        self.assertEqual(r.returncode, 1, (r.stdout, r.stderr))
        self.assertIn("namespace quota gpu-mem", r.stderr)
        r = self.vgpu("resize", "b", "--gpumem", "9904")  # exactly the quota
        self.assertEqual(r.returncode, 0, r.stderr)


class KillTest(ResizeBase):
    """vgpu-scheduler killed with SIGKILL at each step of a resize: once it is back, the
    pod's decision (what the node applies) and the record (what is charged) agree on the
    old limits or the new ones, and the request is answered."""

    def faults(self, **kw):
        status, body = self.cluster.apic.request("POST", "/admin/faults", kw)
        self.assertEqual(status, 200, body)

    def delayed(self):
        return self.cluster.apic.request("GET", "/admin/stats")[1].get("delayed", 0)

    def hold(self, method_path, lands):
        if lands:
            self.faults(delay_ms=1500, delay_next=1, match=method_path)
        else:
            self.faults(delay_ms=1500, delay_next=1, fail_next=1, fail_status=500,
                        match=method_path)

    def kill_while(self, method_path, lands=True):
        """Starts a resize, kills the scheduler while the request matching method_path is
        held by the API server (lands: it is carried out afterwards; else it fails)."""
        base = self.delayed()
        # The command's own write of the request is a PATCH of the pod too: a step that
        # matches it is armed only once the scheduler holds the request (reading quotas).
        late = method_path.startswith("PATCH")
        if late:
            self.faults(delay_ms=700, delay_next=1, match="GET /api/v1/namespaces/default/resourcequotas")
        else:
            self.hold(method_path, lands)
        proc = subprocess.Popen([os.path.join(BUILD, "bin", "vgpu"), "resize", "a", "--gpumem",
                                 "7000", "--kubeconfig", self.cluster.kubeconfig,
                                 "--request-timeout", "30"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if late:
            H.wait_for(lambda: self.delayed() > base, "the scheduler reading quotas")
            self.hold(method_path, lands)
            base += 1
        H.wait_for(lambda: self.delayed() > base, "the held request " + method_path)
        self.cluster.kill9()
        time.sleep(1.7)  # the held request finishes (or fails) with its client gone
        self.cluster.start()
        self.cluster.wait_ready()
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, (method_path, out, err, self.cluster.log()[-3000:]))
        self.assertEqual(self.shown(), (7000, 30, 1))
        H.wait_for(lambda: self.records() >= {"vgpu-decision-uid-a-g1"} and
                   "vgpu-decision-uid-a" not in self.records(), "one record, generation 1")
        self.assertEqual(self.charged(), 7000 + OTHERS)

    def test_killed_reading_quotas(self):
        self.kill_while("GET /api/v1/namespaces/default/resourcequotas")

    def test_killed_writing_record(self):
        self.kill_while("POST /api/v1/namespaces/vgpu-system/configmaps")

    def test_killed_record_not_written(self):
        self.kill_while("POST /api/v1/namespaces/vgpu-system/configmaps", lands=False)

    def test_killed_writing_pod(self):
        self.kill_while("PATCH /api/v1/namespaces/default/pods/a")

    def test_killed_pod_not_written(self):
        self.kill_while("PATCH /api/v1/namespaces/default/pods/a", lands=False)


if __name__ == "__main__":
    BUILD = sys.argv.pop(1)
    unittest.main()
