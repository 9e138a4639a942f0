"""vgpu-device-plugin against a fake kubelet written with python3-grpcio (Debian's).

    /usr/bin/python3 deviceplugin_kubelet.py BUILD_DIR SOURCE_DIR [unittest names...]

The fake kubelet serves Registration on <dir>/kubelet.sock and, on Register, dials the
plugin back and drives it as kubelet does: GetDevicePluginOptions, ListAndWatch (kept
open), GetPreferredAllocation, Allocate, PreStartContainer. It then restarts the way
kubelet does (wipes the directory, creates kubelet.sock again) and expects the plugin to
register again. vgpu mode runs against tests/kube_api_server.py; the end-to-end case runs
libvgpu_probe on fakegpu with the env Allocate returned and checks the limit holds.
Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vg_skip  # noqa: E402  (skips, or fails under CI, when grpc is missing)

try:
    import grpc
    from concurrent import futures
    import vg_proto  # google.protobuf: skipped below when missing
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-grpcio (%s; run with /usr/bin/python3)" % exc)

BUILD = SOURCE = None
M = {}
DEVICES = "Test GPU A:4GiB:40,Test GPU B:8GiB:80"


def load_messages(path):
    vg_proto.load_messages(path, M)


def wait_for(pred, timeout=15.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def read_text(path):
    """The stripped text of path, or "" while it does not exist."""
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def order_index(ids, uuid):
    """NVML index of uuid: ListAndWatch lists each GPU's devices in index order."""
    seen = []
    for d in ids:
        u = d.rsplit("-", 1)[0]
        if u not in seen:
            seen.append(u)
    return seen.index(uuid)


class FakeKubelet:
    """Registration server; on Register it connects back and watches the plugin."""

    def __init__(self, directory):
        self.dir = directory
        self.cond = threading.Condition()
        self.registrations = []  # (time, RegisterRequest)
        self.lists = {}  # resource -> list of [(id, health)] per message
        self.channels = {}
        self.options = {}
        self.server = None
        self.start()

    def start(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._register, request_deserializer=M["RegisterRequest"].FromString,
                response_serializer=lambda m: m.SerializeToString()),
        })
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix://" + os.path.join(self.dir, "kubelet.sock"))
        self.server.start()

    def restart(self):
        """kubelet's restart: stop, wipe the directory, serve kubelet.sock again."""
        self.server.stop(0).wait()
        for ch in self.channels.values():
            ch.close()
        self.channels = {}
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        self.start()

    def _register(self, req, ctx):
        with self.cond:
            self.registrations.append((time.time(), req))
            self.cond.notify_all()
        threading.Thread(target=self._connect, args=(req,), daemon=True).start()
        return M["Empty"]()

    def _connect(self, req):
        # A plugin that registers again (restarted) gets a fresh channel: the old one's
        # connection state (and reconnect backoff) must not carry over.
        ch = grpc.insecure_channel("unix://" + os.path.join(self.dir, req.endpoint),
                                   options=[("grpc.default_authority", "localhost"),
                                            ("grpc.use_local_subchannel_pool", 1)])
        old = self.channels.get(req.resource_name)
        self.channels[req.resource_name] = ch
        if old is not None:
            old.close()
        opts = self.call(req.resource_name, "GetDevicePluginOptions", M["Empty"](),
                         "DevicePluginOptions")
        self.options[req.resource_name] = opts
        stream = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                 request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=M["ListAndWatchResponse"].FromString)
        try:
            for resp in stream(M["Empty"]()):
                with self.cond:
                    self.lists.setdefault(req.resource_name, []).append(
                        [(d.ID, d.health) for d in resp.devices])
                    self.cond.notify_all()
        except grpc.RpcError:
            pass

    def call(self, resource, method, request, reply):
        ch = self.channels[resource]
        fn = ch.unary_unary("/v1beta1.DevicePlugin/" + method,
                            request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=M[reply].FromString)
        return fn(request, timeout=10)

    def latest(self, resource):
        with self.cond:
            lst = self.lists.get(resource)
            return lst[-1] if lst else None

    def allocate(self, resource, ids):
        req = M["AllocateRequest"]()
        req.container_requests.add().devices_ids.extend(ids)
        return self.call(resource, "Allocate", req, "AllocateResponse")

    def preferred(self, resource, available, size):
        req = M["PreferredAllocationRequest"]()
        c = req.container_requests.add()
        c.available_deviceIDs.extend(available)
        c.allocation_size = size
        return list(self.call(resource, "GetPreferredAllocation", req,
                              "PreferredAllocationResponse").container_responses[0].deviceIDs)

    def stop(self):
        self.server.stop(0).wait()
        for ch in self.channels.values():
            ch.close()


class Plugin:
    def __init__(self, tmp, config_text, kubeconfig=None, extra_env=None, args=(), prefix=()):
        """prefix: a command the daemon runs under (the benchmarks' callgrind)."""
        self.log = open(os.path.join(tmp, "plugin.log"), "w+")
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config_text)
        env = dict(os.environ)
        env.update({"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
                    "FAKEGPU_DEVICES": DEVICES,
                    "FAKEGPU_STATE_DIR": os.path.join(tmp, "state")})
        env.pop("KUBERNETES_SERVICE_HOST", None)
        env.update(extra_env or {})
        os.makedirs(env["FAKEGPU_STATE_DIR"], exist_ok=True)
        cmd = [os.path.join(BUILD, "bin", "vgpu-device-plugin"), "--node-name", "node-1",
               "--kubelet-dir", os.path.join(tmp, "kubelet"), "--config", cfg,
               "--region-dir", os.path.join(tmp, "containers"),
               "--compute-board-dir", os.path.join(tmp, "board"),
               "--libvgpu-path", os.path.join(BUILD, "lib", "libvgpu.so"),
               "--ld-so-preload-path", os.path.join(tmp, "ld.so.preload")] + list(args)
        if kubeconfig:
            cmd += ["--kubeconfig", kubeconfig]
        cmd = list(prefix) + cmd
        self.env = env
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class ApiServer:
    def __init__(self, tmp):
        pfile = os.path.join(tmp, "port")
        fixture = os.path.join(tmp, "fixture.json")
        with open(fixture, "w") as f:
            json.dump({"nodes": [{"metadata": {"name": "node-1"}}], "pods": []}, f)
        self.proc = subprocess.Popen([sys.executable, os.path.join(SOURCE, "tests",
                                      "kube_api_server.py"), "--port", "0", "--port-file",
                                      pfile, "--fixture", fixture],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = "http://127.0.0.1:%s" % wait_for(lambda: read_text(pfile), what="api port")
        self.kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                    "clusters:\n- name: c\n  cluster:\n    server: %s\n"
                    "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                    "users:\n- name: u\n  user:\n    token: x\n" % self.url)

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": kind})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    @staticmethod
    def pod_for(name, decision_text, scheduler="vgpu-scheduler"):
        """A pod bound to node-1 carrying decision_text, whose spec asks for what the
        decision gives (the device plugin checks it): one container per decided one,
        nvidia.com/gpu = its GPU count."""
        try:
            containers = [{"name": c["name"], "resources": {"limits": {
                "nvidia.com/gpu": str(len(c["gpus"]))}}}
                for c in json.loads(decision_text)["containers"] if c.get("gpus")]
        except (ValueError, KeyError, TypeError):
            containers = [{"name": "main"}]
        return {"metadata": {"name": name, "namespace": "default",
                             "annotations": {"vgpu.io/decision": decision_text}},
                "spec": {"nodeName": "node-1", "schedulerName": scheduler,
                         "containers": containers or [{"name": "main"}]},
                "status": {"phase": "Pending"}}

    def add_pod(self, name, decision_text, pod=None):
        pod = pod or self.pod_for(name, decision_text)
        return self.request("POST", "/api/v1/namespaces/default/pods", pod)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dp-kubelet.")
        os.makedirs(os.path.join(self.tmp, "kubelet"))
        self.kubelet = None
        self.plugin = None
        self.api = None

    def tearDown(self):
        if self.plugin:
            rc = self.plugin.stop()
            out = self.plugin.output()
            if rc not in (0, None) or "ERROR" in out or "AddressSanitizer" in out or os.environ.get("DP_VERBOSE"):
                print(out)
            self.assertNotIn("AddressSanitizer", out)
            self.assertNotIn("LeakSanitizer", out)
        if self.kubelet:
            self.kubelet.stop()
        if self.api:
            self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def registered(self, count=1):
        return wait_for(lambda: len(self.kubelet.registrations) >= count and
                        self.kubelet.registrations[count - 1][1], what="registration %d" % count)


TIME_SLICING = """version: v1
flags:
  migStrategy: none
  gfd:
    oneshot: true
resources:
  gpus:
  - pattern: "*"
    name: gpu
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


class TimeSlicing(Base):
    def test_register_list_allocate_restart(self):
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = Plugin(self.tmp, TIME_SLICING)
        req = self.registered()
        self.assertEqual(req.version, "v1beta1")
        self.assertEqual(req.resource_name, "nvidia.com/gpu.shared")
        self.assertEqual(req.endpoint, "nvidia-gpu.shared.sock")
        # resources.gpus is read, not applied (NVIDIA's plugin ignores it too), and said so.
        self.assertIn("resources.gpus and resources.mig are read but not applied",
                      self.plugin.output())
        # So are gpu-feature-discovery's settings.
        self.assertIn("settings the device plugin does not act on", self.plugin.output())
        self.assertIn("keys=flags.gfd.oneshot,resources.gpus", self.plugin.output())
        self.assertTrue(req.options.get_preferred_allocation_available)
        devs = wait_for(lambda: self.kubelet.latest(req.resource_name), what="ListAndWatch")
        self.assertEqual(len(devs), 8)
        self.assertTrue(all(h == "Healthy" for _, h in devs))
        ids = [d for d, _ in devs]
        self.assertTrue(all("::" in d and d.startswith("GPU-") for d in ids))
        uuids = sorted({d.split("::")[0] for d in ids})
        self.assertEqual(len(uuids), 2)
        self.assertTrue(self.kubelet.options[req.resource_name].get_preferred_allocation_available)

        resp = self.kubelet.allocate(req.resource_name, [ids[0]])
        env = dict(resp.container_responses[0].envs)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], ids[0].split("::")[0])
        self.assertNotIn("CUDA_DEVICE_MEMORY_LIMIT_0", env)  # no enforcement in time-slicing
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate(req.resource_name, ids[:2])
        self.assertIn("maximum request size for shared resources is 1", cm.exception.details())
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate(req.resource_name, ["GPU-nope::0"])
        self.assertIn("unknown device ID", cm.exception.details())
        # kubelet sends one container per call; more than a pod can have is refused.
        many = M["AllocateRequest"]()
        for _ in range(33):
            many.container_requests.add().devices_ids.append(ids[0])
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.call(req.resource_name, "Allocate", many, "AllocateResponse")
        self.assertIn("Allocate for 33 containers (1..32)", cm.exception.details())
        # The benchmarks' timing client (grpc_peer allocate of tests/integration/grpc_peer.c, vgpu's C client) gets
        # the same answers over one connection: each call its own line, timed.
        peer = subprocess.run(
            [os.path.join(BUILD, "tests", "grpc_peer"), "allocate",
             os.path.join(self.tmp, "kubelet", req.endpoint), "localhost"],
            input="%s\nGPU-nope::0\n%s\n" % (ids[0], ids[1]), capture_output=True, text=True,
            timeout=30)
        lines = peer.stdout.splitlines()
        self.assertEqual(len(lines), 3, peer.stdout + peer.stderr)
        self.assertRegex(lines[0], r"^ns=[1-9][0-9]* status=OK len=[1-9][0-9]* message=$")
        self.assertRegex(lines[1], r"^ns=[1-9][0-9]* status=INVALID_ARGUMENT len=0 "
                                   r"message=.*unknown device ID 'GPU-nope::0'")
        self.assertRegex(lines[2], r"^ns=[1-9][0-9]* status=OK ")
        pref = self.kubelet.preferred(req.resource_name, ids, 1)
        self.assertEqual(len(pref), 1)
        self.assertIn(pref[0], ids)
        pre = M["PreStartContainerRequest"]()
        pre.devices_ids.append(ids[0])
        self.kubelet.call(req.resource_name, "PreStartContainer", pre, "PreStartContainerResponse")

        # kubelet restarts: directory wiped, kubelet.sock created again.
        t0 = time.time()
        self.kubelet.restart()
        again = self.registered(2)
        self.assertEqual(again.resource_name, "nvidia.com/gpu.shared")
        self.assertLess(self.kubelet.registrations[1][0] - t0, 10.0)
        wait_for(lambda: len(self.kubelet.lists.get(req.resource_name, [])) >= 2,
                 what="ListAndWatch after restart")
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "kubelet",
                                                    "nvidia-gpu.shared.sock")))

    def test_shared_devices_allocation_policy(self):
        """GetPreferredAllocation of replicas: GPU A has two replicas in use, B none;
        distributed picks B's, packed fills A first."""
        base = ("version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: %s\n"
                "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                "      replicas: 4\n")
        for policy, want_a in (("distributed", 0), ("packed", 2)):
            self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
            self.plugin = Plugin(self.tmp, base % policy)
            req = self.registered()
            ids = sorted(d for d, _ in wait_for(lambda: self.kubelet.latest(req.resource_name),
                                                what="ListAndWatch"))
            a = ids[0].split("::")[0]
            free = [d for d in ids if not d.startswith(a) or d.endswith(("::2", "::3"))]
            pref = self.kubelet.preferred(req.resource_name, free, 2)
            self.assertEqual(sum(d.startswith(a) for d in pref), want_a, (policy, pref))
            self.assertEqual(self.plugin.stop(), 0)
            self.kubelet.stop()
            self.plugin = self.kubelet = None
            shutil.rmtree(os.path.join(self.tmp, "kubelet"))
            os.makedirs(os.path.join(self.tmp, "kubelet"))

    def test_kubelet_missing_at_start(self):
        self.plugin = Plugin(self.tmp, TIME_SLICING)
        wait_for(lambda: "kubelet socket unavailable" in self.plugin.output(),
                 what="missing-socket message")
        self.assertIsNone(self.plugin.proc.poll())
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.assertEqual(self.registered().resource_name, "nvidia.com/gpu.shared")


class BadInput(Base):
    def test_broken_config(self):
        self.plugin = Plugin(self.tmp, "version: v1\nflags:\n  migStrategy: maybe\n")
        self.assertEqual(self.plugin.proc.wait(20), 2)
        out = self.plugin.output()
        self.assertIn("config.yaml:3", out)
        self.assertIn("flags.migStrategy", out)
        self.plugin = None

    def test_nvml_fails_fail_on_init_error(self):
        self.plugin = Plugin(self.tmp, "version: v1\nflags:\n  failOnInitError: true\n",
                             extra_env={"FAKEGPU_DEVICES": "broken"})
        self.assertEqual(self.plugin.proc.wait(20), 1)
        self.assertIn("failOnInitError", self.plugin.output())
        self.assertIn("NVML", self.plugin.output())
        self.plugin = None

    def test_nvml_fails_without_fail_on_init_error(self):
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = Plugin(self.tmp, "version: v1\nflags:\n  failOnInitError: false\n",
                             extra_env={"FAKEGPU_DEVICES": "broken"})
        req = self.registered()
        self.assertEqual(wait_for(lambda: self.kubelet.lists.get(req.resource_name),
                                  what="list")[0], [])
        self.assertIn("serving no GPUs", self.plugin.output())


VGPU = """version: v1
vgpu:
  deviceSplitCount: 4
"""


class Vgpu(Base):
    def start(self):
        self.api = ApiServer(self.tmp)
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = Plugin(self.tmp, VGPU, kubeconfig=self.api.kubeconfig)
        req = self.registered()
        self.assertEqual(req.resource_name, "nvidia.com/gpu")
        self.assertEqual(req.endpoint, "nvidia-gpu.sock")
        devs = wait_for(lambda: self.kubelet.latest("nvidia.com/gpu"), what="list")
        return [d for d, _ in devs]

    def decision(self, uuid, mib, cores, container="main"):
        return json.dumps({"version": 1, "node": "node-1", "time": int(time.time()),
                           "containers": [{"name": container, "gpus": [
                               {"uuid": uuid, "memoryMiB": mib, "cores": cores}]}]})

    @staticmethod
    def hold(probe, env, size):
        """`probe hold SIZE`: its first line is "ready" (holding) or "oom"."""
        proc = subprocess.Popen([probe, "dlsym", "hold", str(size)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = proc.stdout.readline().strip()
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        return line.split()[0] if line else line

    def test_allocate_end_to_end(self):
        ids = self.start()
        self.assertEqual(len(ids), 8)
        uuids = sorted({d.rsplit("-", 1)[0] for d in ids})
        # The inventory annotation is published.
        node = wait_for(lambda: self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                        .get("annotations", {}).get("vgpu.io/gpus"), what="inventory")
        inv = json.loads(node)
        self.assertEqual(inv["mode"], "vgpu")
        self.assertEqual(sorted(g["uuid"] for g in inv["gpus"]), uuids)
        self.assertEqual({g["slots"] for g in inv["gpus"]}, {4})

        target = uuids[1]
        pod = self.api.add_pod("train-0", self.decision(target, 1024, 30))
        uid = pod["metadata"]["uid"]
        # Preferred allocation follows the scheduler's decision: the decided GPU's IDs come
        # last, so only the decision (once the plugin's pod watch has it) can pick them.
        order = [d for d in ids if not d.startswith(target)] + [d for d in ids if d.startswith(target)]
        pref = wait_for(lambda: (lambda p: p if p and p[0].startswith(target) else None)(
            self.kubelet.preferred("nvidia.com/gpu", order, 1)), what="preferred on decided GPU")
        # The watch delivered the decision, so the directory was filled ahead, under a
        # name Allocate renames: the same inode ends up as the container's directory.
        cdir = os.path.join(self.tmp, "containers", "%s_main" % uid)
        ready = os.path.join(self.tmp, "containers", ".ready.%s_main" % uid)
        ino = wait_for(lambda: os.path.exists(ready + "/etc/limits") and os.stat(ready).st_ino,
                       what="prepared directory")
        with open(ready + "/etc/limits") as f:
            self.assertIn("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n" % cdir, f.read())
        resp = self.kubelet.allocate("nvidia.com/gpu", pref)
        c = resp.container_responses[0]
        env = dict(c.envs)
        self.assertEqual(os.stat(cdir).st_ino, ino)
        self.assertFalse(os.path.exists(ready))
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], target)
        self.assertEqual(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "1024m")
        self.assertEqual(env["CUDA_DEVICE_SM_LIMIT"], "30")
        self.assertEqual(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], cdir + "/region")
        self.assertEqual(env["VGPU_LIMITS_FILE"], cdir + "/etc/limits")
        mounts = {m.container_path: (m.host_path, m.read_only) for m in c.mounts}
        self.assertEqual(mounts["/etc/ld.so.preload"], (os.path.join(self.tmp, "ld.so.preload"), True))
        self.assertEqual(mounts[cdir + "/etc"], (cdir + "/etc", True))
        # libvgpu's fixed path, where the environment cannot move it (docs/libvgpu.md): the
        # directory, so that a live resize's new file shows there.
        self.assertEqual(mounts["/etc/vgpu"], (cdir + "/etc", True))
        # The region alone is writable; the directory is not mounted (nothing a container
        # adds to it reaches the host's readers).
        self.assertEqual(mounts[cdir + "/region"], (cdir + "/region", False))
        self.assertNotIn(cdir, mounts)
        self.assertEqual(os.stat(cdir + "/etc/limits").st_mode & 0o777, 0o444)
        with open(cdir + "/etc/limits") as f:
            text = f.read()
        self.assertIn("vgpu-limits 1\n", text)
        self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n", text)

        # The same container is not allocated twice; the next Allocate finds nothing.
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate("nvidia.com/gpu", pref)
        self.assertIn("no scheduling decision", cm.exception.details())

        # End to end: a CUDA process with that env on fakegpu is held to 1 GiB.
        probe = os.path.join(BUILD, "bin", "libvgpu_probe")
        if os.path.exists(probe):
            penv = dict(self.plugin.env)
            penv.update(env)
            # What the container runtime does with NVIDIA_VISIBLE_DEVICES: only that GPU.
            penv["CUDA_VISIBLE_DEVICES"] = str(order_index(ids, target))
            # /etc/ld.so.preload's part, for a process on the host.
            penv["LD_PRELOAD"] = os.path.join(BUILD, "lib", "libvgpu.so")
            # In the sanitizer build the probe is ASan-linked and libvgpu comes first.
            penv["ASAN_OPTIONS"] = ":".join(filter(None, [penv.get("ASAN_OPTIONS"),
                                                          "verify_asan_link_order=0"]))
            info = subprocess.run([probe, "dlsym", "info"], env=penv, capture_output=True,
                                  text=True, timeout=60)
            self.assertEqual(info.returncode, 0, info.stdout + info.stderr)
            self.assertIn("total=%d " % (1024 << 20), info.stdout, (info.stderr, env, open(cdir + "/etc/limits").read()))
            self.assertEqual(self.hold(probe, penv, 512 << 20), "ready")
            self.assertEqual(self.hold(probe, penv, 2048 << 20), "oom")

        # A live resize reaches the node: the scheduler's new decision (generation 1),
        # which its record in vgpu-system holds, replaces the limits file by rename, then
        # raises the generation libvgpu watches.
        before = os.stat(cdir + "/etc/limits").st_ino

        def resize(decision, gen, record=True):
            d = json.loads(decision)
            d["generation"] = gen
            text = json.dumps(d)
            if record:
                self.api.request("POST", "/api/v1/namespaces/vgpu-system/configmaps", {
                    "metadata": {"name": "vgpu-decision-%s-g%d" % (uid, gen),
                                 "namespace": "vgpu-system"},
                    "immutable": True, "data": {"uid": uid, "decision": text}})
            self.api.request("PATCH", "/api/v1/namespaces/default/pods/train-0",
                             {"metadata": {"annotations": {"vgpu.io/decision": text}}})

        def generation():
            with open(cdir + "/etc/generation", "rb") as f:
                raw = f.read()
            self.assertEqual(raw[:8], b"vgpugen1")
            return int.from_bytes(raw[8:16], "little")
        resize(self.decision(target, 2048, 50), 1)
        wait_for(lambda: generation() == 1, what="generation 1")
        with open(cdir + "/etc/limits") as f:
            text = f.read()
        self.assertIn("VGPU_LIMITS_GENERATION=1\n", text)
        self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=2048m\n", text)
        self.assertIn("CUDA_DEVICE_SM_LIMIT_0=50\n", text)
        self.assertNotEqual(os.stat(cdir + "/etc/limits").st_ino, before)
        # A pod author who rewrites the decision past the webhook (no record of it): not
        # applied. Nor a decision moving the container to another GPU, recorded or not.
        resize(self.decision(target, 65536, 99), 2, record=False)
        wait_for(lambda: "record does not hold them" in self.plugin.output(),
                 what="unrecorded decision refused")
        resize(self.decision(uuids[0], 4096, 50), 3)
        wait_for(lambda: "new limits not applied pod" in self.plugin.output(),
                 what="moved decision refused")
        self.assertEqual(generation(), 1)
        with open(cdir + "/etc/limits") as f:
            self.assertEqual(f.read(), text)

        # The pod goes away: its directory is cleaned up.
        self.api.request("DELETE", "/api/v1/namespaces/default/pods/train-0")
        wait_for(lambda: not os.path.exists(cdir), what="directory cleanup")

    def test_held_time_in_inventory(self):
        """The time a container was held behind high priority, as its region counts it,
        reaches the node's inventory (`held`) at the plugin's next write (here its start),
        by pod uid, container and GPU, in whole seconds."""
        ids = self.start()
        uuids = sorted({d.rsplit("-", 1)[0] for d in ids})
        target = uuids[1]
        pod = self.api.add_pod("low-0", self.decision(target, 1024, 30))
        uid = pod["metadata"]["uid"]
        order = [d for d in ids if not d.startswith(target)] + \
            [d for d in ids if d.startswith(target)]
        pref = wait_for(lambda: (lambda p: p if p and p[0].startswith(target) else None)(
            self.kubelet.preferred("nvidia.com/gpu", order, 1)), what="preferred on decided GPU")
        self.kubelet.allocate("nvidia.com/gpu", pref)
        region = os.path.join(self.tmp, "containers", "%s_main" % uid, "region")
        with open(region, "r+b") as f:  # device 0's held_ns (docs/protocol.md)
            f.seek(64 + 88 + 12 * 8)
            f.write(struct.pack("<q", 12700000000))
        # The running plugin wrote its inventory before the container ran: none held yet.
        inv = json.loads(self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                         ["annotations"]["vgpu.io/gpus"])
        self.assertNotIn(12, [h["seconds"] for h in inv.get("held", [])])
        self.assertEqual(self.plugin.stop(), 0, self.plugin.output())
        self.plugin.log.close()
        self.api.request("PATCH", "/api/v1/nodes/node-1",
                         {"metadata": {"annotations": {"vgpu.io/gpus": None}}})
        self.plugin = Plugin(self.tmp, VGPU, kubeconfig=self.api.kubeconfig)
        text = wait_for(lambda: self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                        .get("annotations", {}).get("vgpu.io/gpus"), what="inventory")
        inv = json.loads(text)
        gpu = [g["uuid"] for g in inv["gpus"]].index(target)
        self.assertEqual(inv["held"], [{"pod": uid, "container": "main", "gpu": gpu,
                                        "seconds": 12}])

    def test_pod_not_yet_watched(self):
        """A pod bound a moment before Allocate, its watch event not delivered yet: the
        plugin looks the node's pods up directly instead of failing."""
        ids = self.start()
        uuids = sorted({d.rsplit("-", 1)[0] for d in ids})

        def synced():
            try:
                self.kubelet.allocate("nvidia.com/gpu", ids[:1])
            except grpc.RpcError as e:
                return "no scheduling decision" in e.details()
            raise AssertionError("Allocate succeeded without a decision")
        wait_for(synced, what="pod list loaded")
        self.api.request("POST", "/admin/faults", {"watch_paused": True})
        uid = self.api.add_pod("late-0", self.decision(uuids[0], 512, 20))["metadata"]["uid"]
        mine = [d for d in ids if d.startswith(uuids[0])]
        resp = self.kubelet.allocate("nvidia.com/gpu", mine[:1])
        env = dict(resp.container_responses[0].envs)
        self.assertEqual(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "512m")
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], uuids[0])
        self.assertTrue(os.path.isdir(os.path.join(self.tmp, "containers", "%s_main" % uid)))
        self.assertIn("looking this node's pods up", self.plugin.output())

        # The API server fails the lookup: the call still ends, with the usual message.
        uid1 = self.api.add_pod("late-1", self.decision(uuids[1], 256, 0))["metadata"]["uid"]
        self.api.request("POST", "/admin/faults",
                         {"fail_next": 1, "match": "GET /api/v1/pods?fieldSelector="})
        other = [d for d in ids if d.startswith(uuids[1])]
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate("nvidia.com/gpu", other[:1])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("no scheduling decision", cm.exception.details())
        self.assertIn("looking up this node's pods failed", self.plugin.output())
        # kubelet retries the pod: the next lookup works.
        self.api.request("POST", "/admin/faults", {"match": ""})
        resp = self.kubelet.allocate("nvidia.com/gpu", other[:1])
        self.assertEqual(dict(resp.container_responses[0].envs)["CUDA_DEVICE_MEMORY_LIMIT_0"],
                         "256m")
        self.assertTrue(os.path.isdir(os.path.join(self.tmp, "containers", "%s_main" % uid1)))

        # The watch catches up: nothing is allocated twice, nothing is swept.
        self.api.request("POST", "/admin/faults", {"watch_paused": False})
        wait_for(synced, what="watch caught up")
        self.api.request("DELETE", "/api/v1/namespaces/default/pods/late-1")
        wait_for(lambda: not os.path.exists(os.path.join(self.tmp, "containers",
                                                         "%s_main" % uid1)),
                 what="cleanup of the deleted pod")
        self.assertTrue(os.path.isdir(os.path.join(self.tmp, "containers", "%s_main" % uid)))
        self.assertIsNone(self.plugin.proc.poll())

    def test_garbled_and_missing_decision(self):
        ids = self.start()

        def refusal():
            # Until its first pod list arrives the plugin says so ("retry"), as to kubelet.
            with self.assertRaises(grpc.RpcError) as cm:
                self.kubelet.allocate("nvidia.com/gpu", ids[:1])
            return "not loaded yet" not in cm.exception.details() and cm.exception.details()
        self.assertIn("no scheduling decision", wait_for(refusal, what="pod list loaded"))
        self.api.add_pod("bad-0", '{"version": 1, "node": "node-1", "containers": 7}')

        def garbled():
            try:
                self.kubelet.allocate("nvidia.com/gpu", ids[:1])
            except grpc.RpcError as e:
                return "garbled" in e.details() and e.details()
            raise AssertionError("Allocate succeeded without a decision")
        self.assertIn("bad-0", wait_for(garbled, what="garbled-decision message"))
        self.assertEqual(os.listdir(os.path.join(self.tmp, "containers"))
                         if os.path.isdir(os.path.join(self.tmp, "containers")) else [], [])
        self.assertIsNone(self.plugin.proc.poll())


class DriverRoot(Base):
    """The driver and device roots: NVML is loaded from flags.plugin.containerDriverRoot
    (no LD_LIBRARY_PATH), device specs name nodes under flags.nvidiaDevRoot on the host,
    and the IMEX channel found under the container's driver root reaches the container."""

    def driver_root(self, channel):
        root = os.path.join(self.tmp, "driver-root")
        os.makedirs(os.path.join(root, "usr", "lib64"))
        os.symlink(os.path.join(BUILD, "fakegpu", "libnvidia-ml.so.1"),
                   os.path.join(root, "usr", "lib64", "libnvidia-ml.so.1"))
        os.makedirs(os.path.join(root, "dev", "nvidia-caps-imex-channels"))
        if channel:
            open(os.path.join(root, "dev", "nvidia-caps-imex-channels", "channel0"), "w").close()
        return root

    def config(self, root):
        return ("version: v1\nflags:\n  nvidiaDriverRoot: /run/nvidia/driver\n"
                "  nvidiaDevRoot: /host\n  plugin:\n    passDeviceSpecs: true\n"
                "    containerDriverRoot: %s\nimex:\n  channelIDs: [0]\n  required: true\n"
                "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                "      replicas: 2\n" % root)

    def test_roots_and_imex(self):
        root = self.driver_root(channel=True)
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = Plugin(self.tmp, self.config(root), extra_env={"LD_LIBRARY_PATH": ""})
        req = self.registered()
        devs = wait_for(lambda: self.kubelet.latest(req.resource_name), what="ListAndWatch")
        self.assertEqual(len(devs), 4)  # NVML from the driver root found both GPUs
        gpu1 = sorted(d for d, _ in devs)[-1]
        resp = self.kubelet.allocate(req.resource_name, [gpu1]).container_responses[0]
        specs = {d.container_path: d.host_path for d in resp.devices}
        minors = [p for p in specs if p[len("/dev/nvidia"):].isdigit()]
        self.assertEqual(len(minors), 1)
        self.assertEqual(specs[minors[0]], "/host" + minors[0])
        self.assertEqual(specs["/dev/nvidiactl"], "/host/dev/nvidiactl")
        self.assertEqual(specs["/dev/nvidia-caps-imex-channels/channel0"],
                         "/host/dev/nvidia-caps-imex-channels/channel0")
        self.assertEqual(dict(resp.envs)["NVIDIA_IMEX_CHANNELS"], "0")

    def test_required_imex_channel_missing(self):
        root = self.driver_root(channel=False)
        self.plugin = Plugin(self.tmp, self.config(root), extra_env={"LD_LIBRARY_PATH": ""})
        self.assertEqual(self.plugin.proc.wait(20), 2)
        self.assertIn("imex.channelIDs: IMEX channel 0: %s/dev/nvidia-caps-imex-channels/"
                      "channel0 does not exist (imex.required is true)" % root,
                      self.plugin.output())
        self.plugin = None


class Health(Base):
    """A GPU falls off the bus (fakegpu-ctl health N off: NVML answers GPU_IS_LOST) and
    comes back: ListAndWatch and the inventory annotation follow both changes."""

    def ctl(self, *args):
        return subprocess.run([os.path.join(BUILD, "bin", "fakegpu-ctl")] + list(args),
                              env=self.plugin.env, capture_output=True, text=True, timeout=30)

    def inventory(self):
        text = self.api.request("GET", "/api/v1/nodes/node-1")["metadata"].get(
            "annotations", {}).get("vgpu.io/gpus")
        return {g["uuid"]: g["healthy"] for g in json.loads(text)["gpus"]} if text else None

    def test_unhealthy_and_back(self):
        self.api = ApiServer(self.tmp)
        self.kubelet = FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = Plugin(self.tmp, VGPU, kubeconfig=self.api.kubeconfig,
                             extra_env={"VGPU_DP_HEALTH_INTERVAL_MS": "100"})
        self.registered()
        devs = wait_for(lambda: self.kubelet.latest("nvidia.com/gpu"), what="list")
        self.assertTrue(all(h == "Healthy" for _, h in devs))
        status = self.ctl("status")
        self.assertEqual(status.returncode, 0, status.stderr)
        lost_uuid = status.stdout.splitlines()[1].split()[1]  # NVML index 1
        self.assertEqual(wait_for(self.inventory, what="inventory")[lost_uuid], True)

        r = self.ctl("health", "1", "off")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 %s lost" % lost_uuid, self.ctl("status").stdout)

        def health_of(want):
            devs = self.kubelet.latest("nvidia.com/gpu")
            ok = devs and all(h == (want if d.startswith(lost_uuid + "-") else "Healthy")
                              for d, h in devs)
            return devs if ok else None
        devs = wait_for(lambda: health_of("Unhealthy"), what="Unhealthy in ListAndWatch")
        self.assertEqual(sum(h == "Unhealthy" for _, h in devs), 4)  # deviceSplitCount
        wait_for(lambda: (self.inventory() or {}).get(lost_uuid) is False,
                 what="inventory healthy=false")
        self.assertTrue(all(v for u, v in self.inventory().items() if u != lost_uuid))
        self.assertIn("GPU unhealthy", self.plugin.output())

        r = self.ctl("health", lost_uuid, "on")  # by UUID this time
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: health_of("Healthy"), what="Healthy again in ListAndWatch")
        wait_for(lambda: (self.inventory() or {}).get(lost_uuid) is True,
                 what="inventory healthy=true")
        self.assertIn("GPU healthy again", self.plugin.output())

    def test_bad_input(self):
        self.plugin = Plugin(self.tmp, VGPU, extra_env={"VGPU_DP_HEALTH_INTERVAL_MS": "fast"})
        self.assertEqual(self.plugin.proc.wait(20), 2)
        self.assertIn("VGPU_DP_HEALTH_INTERVAL_MS", self.plugin.output())
        for args, msg in [(("health", "7", "off"), "not a UUID or an index below 2"),
                          (("health", "GPU-nope", "off"), "no device has UUID 'GPU-nope'"),
                          (("health", "0", "sideways"), "must be 'on' or 'off'"),
                          (("reboot",), "usage: fakegpu-ctl")]:
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(msg, r.stderr)
        self.plugin = None


if __name__ == "__main__":
    BUILD, SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    load_messages(os.path.join(BUILD, "gen", "grpc", "kubelet", "api.desc"))
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
