"""vgpu-device-plugin --scheduler-protocol volcano against a fake kubelet, fakegpu's NVML
and the test API server, with pods annotated the way Volcano's deviceshare plugin annotates
them (docs/volcano.md).

    /usr/bin/python3 deviceplugin_volcano.py BUILD_DIR SOURCE_DIR [unittest names...]

Covers: the three resources and the node annotations Volcano reads; Allocate of a pod,
of a pod whose first container asks for no GPU, of a pod with two GPU containers; and each
bad decision refused (Allocate error, bind-phase failed, no container directory, the card's
ledger unchanged). Skips when grpc is not importable (fails instead under CI).
"""
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deviceplugin_kubelet as dk  # noqa: E402  (skips or fails when grpc is missing)

grpc = dk.grpc
wait_for = dk.wait_for

NUMBER, MEMORY, CORES = "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores"
DONE = "18446744073709551615"
VOLCANO_CONFIG = """nvidia:
  resourceCountName: volcano.sh/vgpu-number
  resourceMemoryName: volcano.sh/vgpu-memory
  resourceMemoryPercentageName: volcano.sh/vgpu-memory-percentage
  resourceCoreName: volcano.sh/vgpu-cores
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  deviceSplitCount: 4
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuMemoryFactor: 1
"""


class Volcano(dk.Base):
    def start(self, config=VOLCANO_CONFIG, before=None, env=None):
        self.api = dk.ApiServer(self.tmp)
        if before:
            before()
        self.kubelet = dk.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        vc = os.path.join(self.tmp, "device-config.yaml")
        with open(vc, "w") as f:
            f.write(config)
        self.plugin = dk.Plugin(self.tmp, "version: v1\n", kubeconfig=self.api.kubeconfig,
                                extra_env=env,
                                args=("--scheduler-protocol", "volcano", "--volcano-config", vc))
        wait_for(lambda: len(self.kubelet.registrations) >= 3, what="three registrations")
        names = sorted(r.resource_name for _, r in self.kubelet.registrations)
        self.assertEqual(names, sorted([NUMBER, MEMORY, CORES]))
        self.ids = {n: [d for d, _ in wait_for(lambda n=n: self.kubelet.latest(n),
                                                 what="list of " + n)] for n in names}
        self.uuids = sorted({d.rsplit("-", 1)[0] for d in self.ids[NUMBER]})
        return self.ids

    def pod(self, name, devices, containers=(("main", True),), time_=None, extra=None):
        ann = {"volcano.sh/vgpu-node": "node-1",
               "volcano.sh/vgpu-time": str(time_ if time_ is not None else int(time.time())),
               "volcano.sh/bind-time": str(int(time.time())),
               "volcano.sh/vgpu-ids-new": devices,
               "volcano.sh/devices-to-allocate": devices,
               "volcano.sh/bind-phase": "allocating"}
        ann.update(extra or {})
        cs = [{"name": n, "resources": {"limits": {NUMBER: "1"}}} if gpu else {"name": n}
              for n, gpu in containers]
        body = {"metadata": {"name": name, "namespace": "default", "annotations": ann},
                "spec": {"nodeName": "node-1", "schedulerName": "volcano", "containers": cs},
                "status": {"phase": "Pending"}}
        return self.api.request("POST", "/api/v1/namespaces/default/pods", body)["metadata"]["uid"]

    def patch(self, path, annotations):
        req = urllib.request.Request(
            self.api.url + path, method="PATCH",
            data=json.dumps({"metadata": {"annotations": annotations}}).encode(),
            headers={"Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def annotations(self, name):
        return self.api.request("GET", "/api/v1/namespaces/default/pods/" + name)[
            "metadata"].get("annotations", {})

    def number_ids(self, uuid, n=1):
        return [d for d in self.ids[NUMBER] if d.startswith(uuid)][:n]

    def cdir(self, uid, container="main"):
        return os.path.join(self.tmp, "containers", "%s_%s" % (uid, container))

    def allocate(self, ids):
        resp = self.kubelet.allocate(NUMBER, ids)
        return dict(resp.container_responses[0].envs), resp.container_responses[0]

    def refused(self, name, uid, ids, why):
        """Allocate fails naming why; the pod is marked failed; nothing is left behind."""
        with self.assertRaises(grpc.RpcError) as cm:
            self.allocate(ids)
        self.assertIn(why, cm.exception.details())
        ann = wait_for(lambda: (lambda a: a if a.get("volcano.sh/bind-phase") == "failed"
                                else None)(self.annotations(name)), what=name + " failed")
        self.assertEqual(ann["volcano.sh/vgpu-time"], DONE)
        self.assertFalse(os.path.exists(self.cdir(uid)))
        return cm.exception.details()

    def test_register_and_allocate(self):
        ids = self.start()
        # Every resource non-zero: number = 4 per GPU, memory = MiB, cores = 100 per GPU.
        self.assertEqual(len(ids[NUMBER]), 8)
        self.assertEqual(len(ids[MEMORY]), 4096 + 8192)
        self.assertEqual(len(ids[CORES]), 200)
        # The node annotation, as Volcano's decodeNodeDevices reads it.
        node = wait_for(lambda: self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                        .get("annotations", {}).get("volcano.sh/node-vgpu-register"),
                        what="node-vgpu-register")
        self.assertTrue(node.endswith(":"))
        entries = [e for e in node.split(":") if "," in e]
        self.assertEqual(len(entries), 2)
        for e in entries:
            f = e.split(",")
            self.assertEqual(len(f), 6, e)
            self.assertIn(f[0], self.uuids)
            self.assertEqual(f[1], "4")
            self.assertEqual((f[3], f[4], f[5]), ("NVIDIA-Test GPU " + ("A" if f[2] == "4096" else "B"),
                                                  "true", "hami-core"))
        hs = self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]["annotations"][
            "volcano.sh/node-vgpu-handshake"]
        self.assertTrue(hs.startswith("Reported "), hs)
        caps = {e.split(",")[0]: int(e.split(",")[2]) for e in entries}
        b = max(self.uuids, key=lambda u: caps[u])
        uid = self.pod("train-0", "%s,NVIDIA,1024,30:" % b)
        env, c = self.allocate(self.number_ids(b))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], b)
        cdir = self.cdir(uid)
        self.assertEqual(env["VGPU_LIMITS_FILE"], cdir + "/etc/limits")
        mounts = {m.container_path: (m.host_path, m.read_only) for m in c.mounts}
        self.assertEqual(mounts["/etc/vgpu"], (cdir + "/etc", True))
        with open(cdir + "/etc/limits") as f:
            text = f.read()
        self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n", text)
        self.assertIn("CUDA_DEVICE_SM_LIMIT_0=30\n", text)
        self.assertEqual(os.stat(cdir + "/etc/limits").st_mode & 0o777, 0o444)
        # HAMi-core's environment is not vgpu's: no /tmp/vgpu cache, no /usr/local/vgpu lock.
        self.assertNotIn("/tmp/vgpu", json.dumps(env))
        # The write-back of the protocol.
        ann = wait_for(lambda: (lambda a: a if a.get("volcano.sh/bind-phase") == "success"
                                else None)(self.annotations("train-0")), what="success")
        self.assertEqual(ann["volcano.sh/devices-to-allocate"], "")
        self.assertEqual(ann["volcano.sh/vgpu-time"], DONE)
        self.assertEqual(ann["volcano.sh/vgpu-ids-new"], "%s,NVIDIA,1024,30:" % b)
        # The memory and cores resources answer empty responses.
        resp = self.kubelet.allocate(MEMORY, ids[MEMORY][:1024])
        self.assertEqual(dict(resp.container_responses[0].envs), {})
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate(MEMORY, [b + "-memory-99999"])
        self.assertIn("unknown device ID", cm.exception.details())
        # Nothing else pending: refused, naming why.
        with self.assertRaises(grpc.RpcError) as cm:
            self.allocate(self.number_ids(b))
        self.assertIn("no pod placed on node node-1 by Volcano waits for 1 GPU",
                      cm.exception.details())

    def test_node_lock_released(self):
        self.start()
        self.patch("/api/v1/nodes/node-1", {"hamivgpu": "2026-11-29T03:00:00Z"})
        self.pod("locked", "%s,NVIDIA,100,0:" % self.uuids[0])
        self.allocate(self.number_ids(self.uuids[0]))
        wait_for(lambda: "hamivgpu" not in self.api.request("GET", "/api/v1/nodes/node-1")[
            "metadata"].get("annotations", {}), what="node lock released")

    def test_non_gpu_container_first(self):
        self.start()
        uid = self.pod("side", "%s,NVIDIA,512,10:" % self.uuids[0],
                       containers=(("sidecar", False), ("main", True)))
        env, _ = self.allocate(self.number_ids(self.uuids[0]))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], self.uuids[0])
        self.assertTrue(os.path.isdir(self.cdir(uid, "main")))
        self.assertFalse(os.path.exists(self.cdir(uid, "sidecar")))

    def test_two_gpu_containers(self):
        self.start()
        a, b = self.uuids
        uid = self.pod("two", "%s,NVIDIA,512,10:;%s,NVIDIA,256,20:" % (a, b),
                       containers=(("first", True), ("log", False), ("second", True)))
        env, _ = self.allocate(self.number_ids(a))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], a)
        with open(self.cdir(uid, "first") + "/etc/limits") as f:
            self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=512m\n", f.read())
        ann = wait_for(lambda: (lambda x: x if x.get("volcano.sh/devices-to-allocate", "").startswith(";")
                                else None)(self.annotations("two")), what="first consumed")
        self.assertEqual(ann["volcano.sh/bind-phase"], "allocating")
        env, _ = self.allocate(self.number_ids(b))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], b)
        with open(self.cdir(uid, "second") + "/etc/limits") as f:
            self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=256m\n", f.read())
        ann = wait_for(lambda: (lambda x: x if x.get("volcano.sh/bind-phase") == "success"
                                else None)(self.annotations("two")), what="success")
        self.assertEqual(ann["volcano.sh/devices-to-allocate"], ";")
        self.assertFalse(os.path.exists(self.cdir(uid, "log")))

    def test_bad_decisions(self):
        self.start()
        caps = {}
        node = self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]["annotations"][
            "volcano.sh/node-vgpu-register"]
        for e in node.split(":"):
            if "," in e:
                caps[e.split(",")[0]] = int(e.split(",")[2])
        small, big = sorted(self.uuids, key=lambda u: caps[u])
        ids = self.number_ids(big)
        # Malformed and truncated strings.
        uid = self.pod("trunc", "%s,NVIDIA,1024" % big)
        self.refused("trunc", uid, ids, "closing ':' (truncated?)")
        uid = self.pod("fields", "%s,NVIDIA,1024,30,9:" % big)
        self.refused("fields", uid, ids, "more than 4 fields")
        uid = self.pod("cores", "%s,NVIDIA,1024,101:" % big)
        self.refused("cores", uid, ids, "cores '101'")
        # A UUID of another node.
        uid = self.pod("elsewhere", "GPU-00000000-1111-2222-3333-444444444444,NVIDIA,1024,30:")
        self.refused("elsewhere", uid, ids, "which this node does not have")
        # Memory over the card.
        uid = self.pod("huge", "%s,NVIDIA,%d,30:" % (big, caps[big] + 1))
        self.refused("huge", uid, ids, "MiB asked on GPU %s, which has %d MiB" % (big, caps[big]))
        # A card already promised: 6000 MiB given, 3000 more do not fit.
        self.pod("holder", "%s,NVIDIA,6000,60:" % big)
        self.allocate(ids)
        uid = self.pod("late", "%s,NVIDIA,3000,10:" % big)
        why = self.refused("late", uid, ids, "already promised")
        self.assertIn("3000 MiB asked, %d MiB left" % (caps[big] - 6000), why)
        uid = self.pod("cpu", "%s,NVIDIA,100,41:" % big)
        self.refused("cpu", uid, ids, "41 % of compute asked, 40 % left")
        # Two pending pods with the same vgpu-time: both refused. The watch is held back so
        # that the plugin sees both at once (through its direct lookup), not one by one.
        t = int(time.time()) - 100
        self.api.request("POST", "/admin/faults", {"watch_paused": True})
        self.pod("twin-a", "%s,NVIDIA,100,1:" % small, time_=t)
        self.pod("twin-b", "%s,NVIDIA,100,1:" % small, time_=t)
        with self.assertRaises(grpc.RpcError) as cm:
            self.allocate(self.number_ids(small))
        self.api.request("POST", "/admin/faults", {"watch_paused": False})
        self.assertIn("same volcano.sh/vgpu-time", cm.exception.details())
        for name in ("twin-a", "twin-b"):
            wait_for(lambda n=name: self.annotations(n).get("volcano.sh/bind-phase") == "failed",
                     what=name + " failed")
        # The ledger holds only the holder: once it is gone, the whole card fits.
        self.api.request("DELETE", "/api/v1/namespaces/default/pods/holder")
        uid = self.pod("whole", "%s,NVIDIA,%d,100:" % (big, caps[big]))

        def whole():
            try:
                self.allocate(ids)
                return True
            except grpc.RpcError as e:
                # Until the watch brings the twins' failure and the holder's deletion.
                self.assertTrue(any(w in e.details() for w in (
                    "already promised", "same volcano.sh/vgpu-time", "no pod placed")),
                    e.details())
                self.patch("/api/v1/namespaces/default/pods/whole",
                           {"volcano.sh/bind-phase": "allocating",
                            "volcano.sh/vgpu-time": str(int(time.time()))})
                return False
        wait_for(whole, what="the whole card once the holder is gone")
        self.assertTrue(os.path.isdir(self.cdir(uid)))

    def register(self):
        text = self.api.request("GET", "/api/v1/nodes/node-1")["metadata"].get(
            "annotations", {}).get("volcano.sh/node-vgpu-register")
        return {e.split(",")[0]: e.split(",") for e in (text or "").split(":") if "," in e}

    def test_ledger_rebuilt_at_start_and_health(self):
        """A pod allocated before the plugin (re)started still holds its share of the card:
        the ledger is rebuilt from the node's pods. A lost GPU turns false in the node
        annotation, and true again."""
        status = subprocess.run([os.path.join(dk.BUILD, "bin", "fakegpu-ctl"), "status"],
                                env=dict(os.environ, FAKEGPU_DEVICES=dk.DEVICES,
                                         FAKEGPU_STATE_DIR=os.path.join(self.tmp, "state")),
                                capture_output=True, text=True, timeout=30)
        big = status.stdout.splitlines()[1].split()[1]  # NVML index 1: 8 GiB

        def before():
            self.uuids = []
            self.pod("earlier", "%s,NVIDIA,7000,50:" % big,
                     extra={"volcano.sh/bind-phase": "success", "volcano.sh/vgpu-time": DONE,
                            "volcano.sh/devices-to-allocate": ""})
        self.start(before=before, env={"VGPU_DP_HEALTH_INTERVAL_MS": "100"})
        self.assertEqual(self.register()[big][2], "8192")
        uid = self.pod("after", "%s,NVIDIA,2000,10:" % big)
        why = self.refused("after", uid, self.number_ids(big), "already promised")
        self.assertIn("2000 MiB asked, 1192 MiB left", why)
        uid = self.pod("fits", "%s,NVIDIA,1192,50:" % big)
        self.allocate(self.number_ids(big))
        self.assertTrue(os.path.isdir(self.cdir(uid)))
        ctl = [os.path.join(dk.BUILD, "bin", "fakegpu-ctl")]
        subprocess.run(ctl + ["health", "1", "off"], env=self.plugin.env, check=True,
                       capture_output=True, timeout=30)
        wait_for(lambda: self.register()[big][4] == "false", what="lost GPU published")
        self.assertTrue(all(f[4] == "true" for u, f in self.register().items() if u != big))
        subprocess.run(ctl + ["health", "1", "on"], env=self.plugin.env, check=True,
                       capture_output=True, timeout=30)
        wait_for(lambda: self.register()[big][4] == "true", what="GPU back")

    def test_no_pending_pod(self):
        self.start()
        with self.assertRaises(grpc.RpcError) as cm:
            self.allocate(self.number_ids(self.uuids[0]))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("no pod placed on node node-1 by Volcano", cm.exception.details())

    def test_bad_config_refused(self):
        for text, why in (("nvidia:\n  deviceSplitCnt: 4\n", "nvidia.deviceSplitCnt': unknown key"),
                          ("nvidia:\n  resourcePriorityName: volcano.sh/vgpu-priority\n",
                           "HAMi-core's task priority")):
            vc = os.path.join(self.tmp, "bad.yaml")
            with open(vc, "w") as f:
                f.write(text)
            self.plugin = dk.Plugin(self.tmp, "version: v1\n",
                                    args=("--scheduler-protocol", "volcano", "--volcano-config", vc))
            self.assertEqual(self.plugin.proc.wait(20), 2)
            self.assertIn(why, self.plugin.output())
        # --volcano-config without the protocol.
        self.plugin = dk.Plugin(self.tmp, "version: v1\n", args=("--volcano-config", vc))
        self.assertEqual(self.plugin.proc.wait(20), 2)
        self.assertIn("needs --scheduler-protocol volcano", self.plugin.output())
        self.plugin = None


if __name__ == "__main__":
    dk.BUILD, dk.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.load_messages(os.path.join(dk.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
