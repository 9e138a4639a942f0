"""vgpu-device-plugin's dynamic MIG (vgpu.migMode: dynamic) against the fake kubelet of
deviceplugin_kubelet.py, tests/kube_api_server.py and fakegpu with two H100s in MIG mode
without instances (FAKEGPU_MIG="0:;1:").

    /usr/bin/python3 deviceplugin_mig_dynamic.py BUILD_DIR SOURCE_DIR [unittest names...]

Instances: the node publishes each GPU's profiles (as NVML reports them) in vgpu.io/gpus;
pods of 9,000 and 18,000 MiB whose decisions name a 1g.10gb and a 1g.20gb get a GPU
instance made at Allocate, see it as their MIG device (a CUDA process there gets its
memory and SMs), and lose it (only theirs) within 5 s of being deleted.
Refusals: an unknown profile, a placement the profile does not have and a decision naming
another pod's placement are refused with the reason in the pod's events and in
vgpu.io/mig-refused; a bad vgpu.migMode stops the plugin with the key named.
Crash: the plugin killed -9 between the GPU instance and its compute instance leaves
nothing once it is back; the pod's next Allocate makes its instance.
Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request
import uuid as uuidlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deviceplugin_kubelet as dk  # noqa: E402  (skips without grpc; fails under CI)

H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"
DYNAMIC = """version: v1
vgpu:
  deviceSplitCount: 4
  migMode: dynamic
"""


class Base(dk.Base):
    def start(self, config=DYNAMIC, extra=None):
        if not self.api:
            self.api = dk.ApiServer(self.tmp)
        if not self.kubelet:
            self.kubelet = dk.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        env = {"FAKEGPU_DEVICES": H100 + "," + H100, "FAKEGPU_MIG": "0:;1:",
               "VGPU_DP_HEALTH_INTERVAL_MS": "100"}
        env.update(extra or {})
        self.plugin = dk.Plugin(self.tmp, config, kubeconfig=self.api.kubeconfig, extra_env=env)

    def ctl(self, *args):
        return subprocess.run([os.path.join(dk.BUILD, "bin", "fakegpu-ctl")] + list(args),
                              env=self.plugin.env, capture_output=True, text=True, timeout=30)

    def status(self):
        """fakegpu's GPU instances: [(gpu, profile, MIG uuid or None)]."""
        out, gpu = [], None
        for line in self.ctl("status").stdout.splitlines():
            f = line.split()
            if line.startswith("  mig "):
                out.append((gpu, f[2], f[3]))
            elif line.startswith("  gi "):
                out.append((gpu, f[2], None))
            else:
                gpu = int(f[0])
        return out

    def gpu_uuid(self, index):
        """The UUID of GPU index, as fakegpu-ctl status lists it."""
        for line in self.ctl("status").stdout.splitlines():
            f = line.split()
            if not line.startswith(" ") and int(f[0]) == index:
                return f[1]
        raise AssertionError("no GPU %d" % index)

    def inventory(self):
        text = dk.wait_for(lambda: self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                           .get("annotations", {}).get("vgpu.io/gpus"), what="inventory")
        return json.loads(text)

    def ids(self):
        devs = dk.wait_for(lambda: self.kubelet.latest("nvidia.com/gpu"), what="list")
        return sorted(d for d, _ in devs)

    @staticmethod
    def decision(uuid, mib, profile, start, container="main"):
        return json.dumps({"version": 1, "node": "node-1", "time": int(time.time()),
                           "containers": [{"name": container, "gpus": [
                               {"uuid": uuid, "memoryMiB": mib, "cores": 0,
                                "mig": {"profile": profile, "start": start}}]}]})

    def add(self, name, uuid, mib, profile, start, request_mib=None):
        """A pod whose decision names a MIG instance (mib: the profile's memory) and whose
        container asks for request_mib of GPU memory (nvidia.com/gpumem), when given."""
        text = self.decision(uuid, mib, profile, start)
        pod = dk.ApiServer.pod_for(name, text)
        if request_mib:
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = \
                str(request_mib)
        pod["metadata"]["uid"] = str(uuidlib.uuid4())  # as the API server makes them
        return self.api.add_pod(name, text, pod)["metadata"]["uid"]

    def allocate(self, uuid, ids):
        """Allocate of one device of GPU uuid once the plugin's pod watch has the pod."""
        dev = [d for d in ids if d.startswith(uuid + "-")][:1]

        def attempt():
            try:
                return self.kubelet.allocate("nvidia.com/gpu", dev)
            except dk.grpc.RpcError as e:
                if "no scheduling decision" in e.details() or "not loaded" in e.details():
                    return None
                raise
        return dk.wait_for(attempt, what="Allocate")

    def refused(self, uuid, ids, words, what, placement=""):
        """Allocate of a device of GPU uuid is refused for the reason words say (and for the
        placement named, when given). Until the plugin's watch has seen an earlier pod go,
        Allocate may still pick that one (refused for its own reason, perhaps the same words):
        the attempt is repeated until this refusal shows."""
        dev = [d for d in ids if d.startswith(uuid + "-")][:1]

        def attempt():
            try:
                self.kubelet.allocate("nvidia.com/gpu", dev)
            except dk.grpc.RpcError as e:
                d = e.details()
                return d if words in d and placement in d else None
            raise AssertionError("Allocate succeeded: " + what)
        return dk.wait_for(attempt, what=what)

    def events(self, reason):
        items = self.api.request("GET", "/api/v1/namespaces/default/events").get("items", [])
        return [e for e in items if e.get("reason") == reason]


class Instances(Base):
    def scrape_monitor(self):
        """One /metrics page of vgpu-monitor over this test's containers directory."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        mon = subprocess.Popen([os.path.join(dk.BUILD, "bin", "vgpu-monitor"), "--node-name",
                                "node-1", "--listen", "127.0.0.1:%d" % port, "--policy", "warn",
                                "--registration-check", "off", "--containers-dir",
                                os.path.join(self.tmp, "containers")],
                               env=self.plugin.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            def page():
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                                timeout=5) as r:
                        text = r.read().decode()
                    return text if "vgpu_container_memory_limit_bytes{" in text else None
                except OSError:
                    return None
            return dk.wait_for(page, what="vgpu-monitor's metrics")
        finally:
            mon.terminate()
            mon.wait()

    def test_pods_get_instances_and_lose_them(self):
        self.start()
        self.registered()
        ids = self.ids()
        inv = self.inventory()
        gpus = {g["uuid"]: g for g in inv["gpus"]}
        self.assertEqual(len(gpus), 2)
        uuid0 = self.gpu_uuid(0)
        mig = gpus[uuid0]["mig"]
        self.assertEqual(mig["slices"], 8)
        self.assertEqual(mig.get("instances", []), [])
        prof = {p["name"]: p for p in mig["profiles"]}
        # NVML's answers for an H100 80GB (docs/fakegpu.md's table), not a table of ours.
        self.assertEqual((prof["1g.10gb"]["id"], prof["1g.10gb"]["memoryMiB"],
                          prof["1g.10gb"]["size"], prof["1g.10gb"]["placements"]),
                         (19, 9984, 1, [0, 1, 2, 3, 4, 5, 6]))
        self.assertEqual((prof["3g.40gb"]["id"], prof["3g.40gb"]["placements"]), (9, [0, 4]))
        self.assertEqual(prof["1g.20gb"]["placements"], [0, 2, 4, 6])

        # 9,000 MiB: a 1g.10gb at slice 6; 18,000 MiB: a 1g.20gb at slice 2.
        # (One at a time: Allocate cannot tell two pending pods on one GPU apart.)
        uid_a = self.add("small", uuid0, 9984, "1g.10gb", 6, request_mib=9000)
        env_a = dict(self.allocate(uuid0, ids).container_responses[0].envs)
        uid_b = self.add("large", uuid0, 20096, "1g.20gb", 2, request_mib=18000)
        env_b = dict(self.allocate(uuid0, ids).container_responses[0].envs)
        mig_a, mig_b = env_a["NVIDIA_VISIBLE_DEVICES"], env_b["NVIDIA_VISIBLE_DEVICES"]
        self.assertTrue(mig_a.startswith("MIG-") and mig_b.startswith("MIG-"), (mig_a, mig_b))
        self.assertNotEqual(mig_a, mig_b)
        self.assertEqual(env_a["CUDA_DEVICE_MEMORY_LIMIT_0"], "9984m")
        self.assertEqual(env_b["CUDA_DEVICE_MEMORY_LIMIT_0"], "20096m")
        self.assertEqual(sorted(self.status()), sorted([(0, "1g.10gb", mig_a),
                                                        (0, "1g.20gb", mig_b)]))
        # The inventory names each instance's pod.
        inst = dk.wait_for(lambda: (lambda i: i if len(i) == 2 else None)(
            {g["uuid"]: g for g in self.inventory()["gpus"]}[uuid0]["mig"].get("instances", [])),
            what="instances in the inventory")
        self.assertEqual(sorted((i["profile"], i["start"], i["size"], i["pod"]) for i in inst),
                         [("1g.10gb", 6, 1, uid_a), ("1g.20gb", 2, 2, uid_b)])

        # vgpu top lists each instance with its profile, pod and age.
        top = subprocess.run([os.path.join(dk.BUILD, "bin", "vgpu"), "top", "--once",
                              "--containers-dir", os.path.join(self.tmp, "containers")],
                             env=self.plugin.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(top.returncode, 0, top.stderr)
        rows = [line.split() for line in top.stdout.splitlines() if "MIG-" in line]
        self.assertEqual(sorted((r[0], r[1], r[2], r[4]) for r in rows),
                         sorted([("0", mig_a, "1g.10gb", "small"), ("0", mig_b, "1g.20gb", "large")]),
                         top.stdout)
        self.assertTrue(all(r[-1] == "ago" and r[-2].endswith("s") for r in rows), top.stdout)

        # vgpu-monitor exports each instance with its profile, pod and when it was made.
        metrics = self.scrape_monitor()
        samples = [line for line in metrics.splitlines()
                   if line.startswith("vgpu_container_mig_instance_created_seconds{")]
        self.assertEqual(len(samples), 2, metrics)
        for line in samples:
            labels, value = line.rsplit(" ", 1)
            small = 'pod_uid="%s"' % uid_a in labels
            self.assertTrue(small or 'pod_uid="%s"' % uid_b in labels, line)
            self.assertTrue(abs(int(value) - time.time()) < 600, line)
            self.assertIn('mig_uuid="%s"' % (mig_a if small else mig_b), labels)
            self.assertIn('profile="%s"' % ("1g.10gb" if small else "1g.20gb"), labels)

        # A CUDA process in the container sees the MIG device: its memory and SMs.
        probe_env = dict(self.plugin.env, CUDA_VISIBLE_DEVICES=mig_a, MIG_MIB="9984",
                         MIG_SMS="16")
        cuda = subprocess.Popen([os.path.join(dk.BUILD, "tests", "cuda_api"), "mig"],
                                env=probe_env, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(cuda.stdout.readline().strip(), "ready")
        finally:
            cuda.kill()
            cuda.wait()
            cuda.stdout.close()

        # The small pod goes: its instance, and only its, within 5 s.
        t0 = time.monotonic()
        self.api.request("DELETE", "/api/v1/namespaces/default/pods/small")
        dk.wait_for(lambda: all(m != mig_a for _, _, m in self.status()), timeout=5.0,
                    what="the deleted pod's instance destroyed")
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assertEqual(self.status(), [(0, "1g.20gb", mig_b)])


    def test_processes_keep_an_instance_and_a_gpu(self):
        """An instance whose pod is gone stays while a process runs in it, and goes once
        it ends; a GPU running work outside MIG instances is not reconfigured."""
        self.start()
        self.registered()
        ids = self.ids()
        uuid0, uuid1 = self.gpu_uuid(0), self.gpu_uuid(1)
        self.add("busy", uuid0, 9984, "1g.10gb", 0)
        mig = dict(self.allocate(uuid0, ids).container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"]
        cuda = subprocess.Popen([os.path.join(dk.BUILD, "tests", "cuda_api"), "mig"],
                                env=dict(self.plugin.env, CUDA_VISIBLE_DEVICES=mig,
                                         MIG_MIB="9984", MIG_SMS="16"),
                                stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(cuda.stdout.readline().strip(), "ready")
            self.api.request("DELETE", "/api/v1/namespaces/default/pods/busy")
            dk.wait_for(lambda: "GPU instance not destroyed" in self.plugin.output(),
                        what="the destruction refused while the process runs")
            self.assertEqual(self.status(), [(0, "1g.10gb", mig)])
        finally:
            cuda.kill()
            cuda.wait()
            cuda.stdout.close()
        dk.wait_for(lambda: self.status() == [], timeout=5.0,
                    what="the instance destroyed once its process ended")

        # Work outside MIG on GPU 1: no instance is made there.
        holder = subprocess.Popen([os.path.join(dk.BUILD, "tests", "nvml_gpu_proc"), "1", "64",
                                   "0"], env=self.plugin.env, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "ready")
            self.add("other", uuid1, 9984, "1g.10gb", 0)
            self.refused(uuid1, ids, "outside MIG instances", "the GPU with non-MIG work refused")
            self.assertEqual(self.status(), [])
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()


class Refusals(Base):
    def refuse(self, name, uuid, ids, profile, start, words):
        """Pod name's decision is refused, for the reason words say; then the pod goes."""
        self.add(name, uuid, 9984, profile, start)
        placement = "MIG %s at memory slice %d" % (profile, start)
        details = self.refused(uuid, ids, words, "the refusal of " + name, placement)
        self.assertIn(placement, details)
        self.assertIn("refused", details)
        self.api.request("DELETE", "/api/v1/namespaces/default/pods/" + name)

    def test_bad_decisions(self):
        self.start()
        self.registered()
        ids = self.ids()
        self.inventory()
        uuid0 = self.gpu_uuid(0)
        self.add("owner", uuid0, 9984, "1g.10gb", 0)
        mig = self.allocate(uuid0, ids).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
        self.refuse("unknown", uuid0, ids, "9g.99gb", 0, "offers no MIG profile")
        self.refuse("misplaced", uuid0, ids, "3g.40gb", 2, "cannot start at memory slice 2")
        # A decision naming the owner's placement (a forged or stale one) is refused, and
        # the owner's instance is untouched.
        self.refuse("forged", uuid0, ids, "1g.10gb", 0, "belongs to pod")
        self.refuse("overlap", uuid0, ids, "3g.40gb", 0, "belongs to pod")
        self.assertEqual(self.status(), [(0, "1g.10gb", mig)])
        # Each refusal is in the pod's events and in the node's refused list.
        # (A refusal repeated while a deleted pod was still cached is listed again.)
        want = {("unknown", "9g.99gb"), ("misplaced", "3g.40gb"), ("forged", "1g.10gb"),
                ("overlap", "3g.40gb")}
        dk.wait_for(lambda: want <= {(e["involvedObject"]["name"], e["message"].split()[1])
                                     for e in self.events("MIGPlacementRefused")},
                    what="an event on each refused pod")
        text = dk.wait_for(lambda: (lambda a: a if a and {(r["profile"], r["start"]) for r in
                                                         json.loads(a)["refused"]} >=
                                    {("9g.99gb", 0), ("3g.40gb", 2), ("1g.10gb", 0),
                                     ("3g.40gb", 0)} else None)(self.api.request(
                                        "GET", "/api/v1/nodes/node-1")["metadata"]
                                    .get("annotations", {}).get("vgpu.io/mig-refused")),
                           what="vgpu.io/mig-refused")
        refused = json.loads(text)
        self.assertEqual(refused["version"], 1)
        self.assertEqual({r["uuid"] for r in refused["refused"]}, {uuid0})
        self.assertTrue(all(r["time"] > 0 and r["reason"] for r in refused["refused"]))

    def test_bad_config(self):
        self.start(DYNAMIC.replace("dynamic", "sometimes"))
        rc = self.plugin.proc.wait(30)
        self.assertNotEqual(rc, 0)
        self.assertIn("vgpu.migMode", self.plugin.output())
        self.plugin.log.close()
        self.plugin = None


STATIC = "version: v1\nvgpu:\n  deviceSplitCount: 4\n"
ALLOWLIST = """nvidia:
  resourceCountName: nvidia.com/gpu
  migProfileAllowlist:
  - models: ["A100-SXM4-40GB"]
    profiles: ["1g.5gb"]
  - models: ["H100-SXM5-80GB", "H100 80GB"]
    profiles: ["1g.10gb", "3g.40gb"]
"""
GEOMETRIES = """nvidia:
  knownMigGeometries:
  - models: ["H100-PCIE-80GB", "H100 80GB HBM3"]
    allowedGeometries:
    - - {name: 1g.10gb, core: 14, memory: 10240, count: 7}
    - - {name: 1g.10gb, core: 14, memory: 10240, count: 1}
      - {name: 2g.20gb, core: 28, memory: 20480, count: 3}
"""


class Hami(Base):
    """HAMi's configuration files, read as HAMi writes them."""

    def files(self, node_mode="mig", device_config=ALLOWLIST):
        node = os.path.join(self.tmp, "config.json")
        with open(node, "w") as f:
            json.dump({"nodeconfig": [{"name": "other", "operatingmode": "hami-core"},
                                      {"name": "node-1", "operatingmode": node_mode,
                                       "filterdevices": {"uuid": [], "index": []}}]}, f)
        dev = os.path.join(self.tmp, "device-config.yaml")
        with open(dev, "w") as f:
            f.write(device_config)
        return STATIC + "  hamiNodeConfig: %s\n  hamiDeviceConfig: %s\n" % (node, dev)

    def profiles(self):
        return [sorted(p["name"] for p in g["mig"]["profiles"])
                for g in self.inventory()["gpus"]]

    def test_operatingmode_mig_and_allowlist(self):
        self.start(self.files())
        self.registered()
        ids = self.ids()
        # operatingmode mig made the node dynamic; the allowlist of its model counts.
        self.assertEqual(self.profiles(), [["1g.10gb", "3g.40gb"]] * 2)
        uuid0 = self.gpu_uuid(0)
        self.add("listed", uuid0, 40448, "3g.40gb", 4)
        env = dict(self.allocate(uuid0, ids).container_responses[0].envs)
        self.assertEqual(self.status(), [(0, "3g.40gb", env["NVIDIA_VISIBLE_DEVICES"])])
        self.add("unlisted", uuid0, 20096, "1g.20gb", 0)
        self.refused(uuid0, ids, "offers no MIG profile '1g.20gb'", "the unlisted profile refused")

    def test_known_mig_geometries(self):
        self.start(self.files(device_config=GEOMETRIES))
        self.registered()
        self.assertEqual(self.profiles(), [["1g.10gb", "2g.20gb"]] * 2)

    def test_other_modes_stay_static(self):
        self.start(self.files(node_mode="hami-core"))
        self.registered()
        self.assertEqual([g.get("mig") for g in self.inventory()["gpus"]], [None, None])

    def test_bad_files(self):
        """Each is an error at start naming the file's key and what is wrong."""
        cases = [
            ("mig", ALLOWLIST.replace('"3g.40gb"', '"1g.5gb"'),
             "names profile '1g.5gb', which NVML does not report"),
            ("mig", ALLOWLIST.replace('"H100-SXM5-80GB", "H100 80GB"', '"H800"'),
             "no entry of nvidia.migProfileAllowlist names its model"),
            ("mig", ALLOWLIST.replace('"1g.10gb"', '"1g.10"'),
             "vgpu.hamiDeviceConfig"),
            ("mig", ALLOWLIST.replace('"1g.10gb"', '"1g.10"'),
             "'1g.10' is not a MIG profile name"),
            ("turbo", ALLOWLIST, "vgpu.hamiNodeConfig"),
            ("turbo", ALLOWLIST, "operatingmode 'turbo' is not one of"),
        ]
        for node_mode, device_config, words in cases:
            self.start(self.files(node_mode, device_config))
            rc = self.plugin.proc.wait(30)
            out = self.plugin.output()
            self.assertNotEqual(rc, 0, out)
            self.assertIn(words, out)
            self.plugin.log.close()
            self.plugin = None


class Crash(Base):
    def test_kill_between_gpu_and_compute_instance(self):
        self.start(extra={"VGPU_DP_MIG_CREATE_PAUSE_MS": "20000"})
        self.registered()
        ids = self.ids()
        self.inventory()
        uuid0 = self.gpu_uuid(0)
        self.add("crash", uuid0, 40448, "3g.40gb", 4)
        dev = [d for d in ids if d.startswith(uuid0 + "-")][:1]
        dk.wait_for(lambda: "crash" in json.dumps(self.api.request(
            "GET", "/api/v1/namespaces/default/pods")), what="pod stored")
        time.sleep(0.5)  # the watch delivers it; a miss would be answered, not paused
        caller = threading.Thread(target=lambda: self.swallow(dev), daemon=True)
        caller.start()
        dk.wait_for(lambda: self.status() == [(0, "3g.40gb", None)],
                    what="a GPU instance without its compute instance")
        self.plugin.proc.send_signal(signal.SIGKILL)
        self.plugin.proc.wait()
        caller.join(15)
        self.assertEqual(self.status(), [(0, "3g.40gb", None)])  # left behind, for now
        self.kubelet.stop()
        self.kubelet = None
        self.start()  # back, without the pause: nothing is left behind
        self.registered()
        dk.wait_for(lambda: self.status() == [], what="the half-made instance destroyed")
        # The pod's Allocate, tried again, makes its instance.
        env = dict(self.allocate(uuid0, self.ids()).container_responses[0].envs)
        self.assertEqual(self.status(), [(0, "3g.40gb", env["NVIDIA_VISIBLE_DEVICES"])])

    def swallow(self, dev):
        try:
            self.kubelet.allocate("nvidia.com/gpu", dev)
        except dk.grpc.RpcError:
            pass


if __name__ == "__main__":
    dk.BUILD, dk.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.load_messages(os.path.join(dk.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
