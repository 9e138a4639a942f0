"""vgpu-dra-plugin against a kubelet stand-in written with python3-grpcio (Debian's).

    /usr/bin/python3 dra_kubelet.py BUILD_DIR SOURCE_DIR DESCRIPTOR [unittest names...]

The stand-in does what kubelet's plugin watcher and DRA manager do: finds the
registration socket under <kubelet-dir>/plugins_registry/, calls GetInfo and
NotifyRegistrationStatus, dials the endpoint it was given and calls NodePrepareResources
/ NodeUnprepareResources (v1 and v1beta1). The messages come from the plugin's own
.proto files (DESCRIPTOR, a FileDescriptorSet the build writes). Claims are served by
tests/dra/claims_api.py; GPUs by fakegpu. Skips when grpc is not importable (fails
instead under CI: tests/lib/vg_skip.py).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import vg_skip  # noqa: E402
from claims_api import ClaimsApi, claim  # noqa: E402

try:
    import grpc
    import vg_proto  # google.protobuf: skipped below when missing
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-grpcio (%s; run with /usr/bin/python3)" % exc)

BUILD = SOURCE = None
M = {}
DRIVER = "gpu.vgpu.io"
DEVICES = "Test GPU A:16GiB:40,Test GPU B:8GiB:80"
V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
V1BETA1 = "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
UID1 = "11111111-1111-4111-8111-111111111111"
UID2 = "22222222-2222-4222-8222-222222222222"
SHARE = "33333333-3333-4333-8333-333333333333"


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


def call(channel, path, request, response_name, timeout=20):
    fn = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                             response_deserializer=M[response_name].FromString)
    return fn(request, timeout=timeout)


def raw_call(channel, path, data, timeout=20):
    fn = channel.unary_unary(path, request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
    return fn(data, timeout=timeout)


def claims_msg(name, *claims):
    req = M[name]()
    for ns, uid, cname in claims:
        c = req.claims.add()
        c.namespace, c.uid, c.name = ns, uid, cname
    return req


def result(request="gpu", device="gpu-0", pool="node-1", memory=None, cores=None, share=None,
           driver=DRIVER):
    r = {"request": request, "driver": driver, "pool": pool, "device": device}
    cap = {}
    if memory is not None:
        cap["memory"] = memory
    if cores is not None:
        cap["cores"] = cores
    if cap:
        r["consumedCapacity"] = cap
    if share:
        r["shareID"] = share
    return r


class Plugin:
    def __init__(self, tmp, kubeconfig, boot_id="boot-1", extra_args=(), extra_env=None,
                 board=None, libvgpu=None):
        self.tmp = tmp
        self.log = open(os.path.join(tmp, "plugin.log"), "a+")  # closed by stop()
        with open(os.path.join(tmp, "boot_id"), "w") as f:
            f.write(boot_id + "\n")
        env = dict(os.environ)
        env.update({"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
                    "FAKEGPU_DEVICES": DEVICES,
                    "FAKEGPU_STATE_DIR": os.path.join(tmp, "fakegpu"),
                    "VGPU_DRA_BOOT_ID_FILE": os.path.join(tmp, "boot_id"),
                    "VGPU_DRA_SOCKET_CHECK_MS": "100",
                    "VGPU_DRA_HEALTH_INTERVAL_MS": "100"})
        if extra_env:
            env.update(extra_env)
        self.env = env
        env.pop("KUBERNETES_SERVICE_HOST", None)
        os.makedirs(env["FAKEGPU_STATE_DIR"], exist_ok=True)
        self.kubelet_dir = os.path.join(tmp, "kubelet")
        self.cdi_dir = os.path.join(tmp, "cdi")
        self.state_dir = os.path.join(tmp, "state")
        self.board = board or os.path.join(tmp, "board")
        cmd = [os.path.join(BUILD, "bin", "vgpu-dra-plugin"), "--node-name", "node-1",
               "--kubelet-dir", self.kubelet_dir, "--kubeconfig", kubeconfig,
               "--cdi-dir", self.cdi_dir, "--state-dir", self.state_dir,
               "--compute-board-dir", self.board,
               "--libvgpu-path", libvgpu or os.path.join(BUILD, "lib", "libvgpu.so"),
               "--ld-so-preload-path", os.path.join(tmp, "ld.so.preload")] + list(extra_args)
        # A killed plugin leaves its sockets: wait for this run's own line.
        self.mark = self.output().count("DRA plugin serving")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.reg_sock = os.path.join(self.kubelet_dir, "plugins_registry", DRIVER + "-reg.sock")
        self.svc_sock = os.path.join(self.kubelet_dir, "plugins", DRIVER, "dra.sock")
        wait_for(lambda: self.output().count("DRA plugin serving") > self.mark
                 or self.proc.poll() is not None, what="plugin serving")
        if self.proc.poll() is not None:
            raise AssertionError("plugin exited: " + self.output())

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def close(self):
        """Stops the plugin (the log stays open for output())."""
        return self.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiServer:
    """tests/kube_api_server.py in a process: serves and validates ResourceSlices as
    kube-apiserver does."""

    def __init__(self, tmp, port=0, version="1.36"):
        self.port_file = os.path.join(tmp, "api-port")
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(SOURCE, "tests", "kube_api_server.py"),
             "--port", str(port), "--port-file", self.port_file, "--k8s-version", version],
            stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(self.port_file) and os.path.getsize(self.port_file),
                 what="API server")
        with open(self.port_file) as f:
            self.port = int(f.read())

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"{}")
        finally:
            conn.close()

    def slices(self, node="node-1"):
        code, body = self.request("GET", "/apis/resource.k8s.io/v1/resourceslices")
        assert code == 200, body
        return [s for s in body["items"] if s["spec"].get("nodeName") == node]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def kubeconfig_for(path, port):
    with open(path, "w") as f:
        f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
                "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                "users:\n- name: u\n  user:\n    token: x\n" % port)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vgpu-dra-")
        self.api = ClaimsApi()
        self.kubeconfig = os.path.join(self.tmp, "kubeconfig")
        self.api.kubeconfig(self.kubeconfig)
        self.plugin = None
        self.channels = []

    def tearDown(self):
        for ch in self.channels:
            ch.close()
        rc, out = 0, ""
        if self.plugin:
            rc = self.plugin.close()
            out = self.plugin.output()
            self.plugin.log.close()
        self.api.stop()
        if not getattr(self._outcome, "success", True):
            print(out, file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)
        # Stopped by SIGTERM, the plugin exits 0 with nothing from the sanitizers.
        self.assertEqual(rc, 0, out[-3000:])
        self.assertNotIn("Sanitizer", out)

    def start(self, boot_id="boot-1", **kw):
        if self.plugin:
            self.plugin.close()
            self.plugin.log.close()
        self.plugin = Plugin(self.tmp, self.kubeconfig, boot_id, **kw)
        return self.plugin

    def channel(self, path):
        # A channel of its own: grpc's shared subchannels would reuse a connection to a
        # plugin killed by the test.
        ch = grpc.insecure_channel("unix://" + path,
                                   options=[("grpc.use_local_subchannel_pool", 1)])
        self.channels.append(ch)
        return ch

    def service(self):
        return self.channel(self.plugin.svc_sock)

    def prepare(self, *claims, version=V1):
        return call(self.service(), version + "NodePrepareResources",
                    claims_msg("NodePrepareResourcesRequest", *claims),
                    "NodePrepareResourcesResponse")

    def unprepare(self, *claims, version=V1):
        return call(self.service(), version + "NodeUnprepareResources",
                    claims_msg("NodeUnprepareResourcesRequest", *claims),
                    "NodeUnprepareResourcesResponse")

    def claim_dirs(self):
        d = os.path.join(self.plugin.state_dir, "claims")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def cdi_files(self):
        d = self.plugin.cdi_dir
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def slots(self):
        out = []
        for root, _, files in os.walk(self.plugin.board):
            out += [f for f in files if f.endswith(".slot")]
        return sorted(out)

    def checkpoint(self):
        with open(os.path.join(self.plugin.state_dir, "checkpoint.json")) as f:
            return json.load(f)

    def spec(self, uid):
        with open(os.path.join(self.plugin.cdi_dir, "vgpu.io-gpu_%s.json" % uid)) as f:
            return json.load(f)


class Registration(Base):
    """GetInfo names the driver, the DRA socket and v1 before v1beta1; a registration socket
    removed (kubelet wiping plugins_registry) is served again for the next watcher scan."""

    def test_register(self):
        self.start()
        reg = self.channel(self.plugin.reg_sock)
        info = call(reg, "/pluginregistration.Registration/GetInfo", M["InfoRequest"](),
                    "PluginInfo")
        self.assertEqual(info.type, "DRAPlugin")
        self.assertEqual(info.name, DRIVER)
        self.assertEqual(info.endpoint, self.plugin.svc_sock)
        self.assertEqual(list(info.supported_versions),
                         ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"])
        self.assertTrue(stat.S_ISSOCK(os.stat(info.endpoint).st_mode))
        st = M["RegistrationStatus"](plugin_registered=True)
        call(reg, "/pluginregistration.Registration/NotifyRegistrationStatus", st,
             "RegistrationStatusResponse")
        wait_for(lambda: "registered with kubelet" in self.plugin.output(), what="log line")
        st = M["RegistrationStatus"](plugin_registered=False, error="unsupported version")
        call(reg, "/pluginregistration.Registration/NotifyRegistrationStatus", st,
             "RegistrationStatusResponse")
        wait_for(lambda: "unsupported version" in self.plugin.output(), what="refusal logged")

    def test_socket_served_again(self):
        self.start()
        os.unlink(self.plugin.reg_sock)
        wait_for(lambda: os.path.exists(self.plugin.reg_sock), what="socket served again")
        info = call(self.channel(self.plugin.reg_sock), "/pluginregistration.Registration/GetInfo",
                    M["InfoRequest"](), "PluginInfo")
        self.assertEqual(info.name, DRIVER)


class Prepare(Base):
    """A claim for 10 GiB and 30 % of gpu-0 becomes a directory with a read-only limits file,
    a compute slot and a CDI spec carrying the device plugin's vgpu container edits; a
    repeated prepare answers the same without new files; unprepare removes all of it."""

    def put_shared(self):
        self.api.put(claim(UID1, "c1", [result(memory="10Gi", cores="30", share=SHARE)]))

    def test_prepare_unprepare(self):
        self.start()
        self.put_shared()
        resp = self.prepare(("default", UID1, "c1"))
        self.assertEqual(list(resp.claims.keys()), [UID1])
        r = resp.claims[UID1]
        self.assertEqual(r.error, "")
        self.assertEqual(len(r.devices), 1)
        d = r.devices[0]
        self.assertEqual(list(d.request_names), ["gpu"])
        self.assertEqual((d.pool_name, d.device_name), ("node-1", "gpu-0"))
        cdi_id = "vgpu.io/gpu=%s_gpu" % UID1
        self.assertEqual(list(d.cdi_device_ids), [cdi_id])
        self.assertEqual(d.share_id, SHARE)

        cdir = os.path.join(self.plugin.state_dir, "claims", UID1 + "_gpu")
        self.assertEqual(self.claim_dirs(), [UID1 + "_gpu"])
        limits = os.path.join(cdir, "etc", "limits")
        self.assertEqual(stat.S_IMODE(os.stat(limits).st_mode), 0o444)
        with open(limits) as f:
            text = f.read()
        self.assertIn("vgpu-limits 1", text)
        spec = self.spec(UID1)
        self.assertEqual(spec["kind"], "vgpu.io/gpu")
        self.assertEqual(spec["cdiVersion"], "0.5.0")
        self.assertEqual([x["name"] for x in spec["devices"]], [UID1 + "_gpu"])
        edits = spec["devices"][0]["containerEdits"]
        env = dict(e.split("=", 1) for e in edits["env"])
        self.assertEqual(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "10240m")
        self.assertEqual(env["CUDA_DEVICE_SM_LIMIT"], "30")
        self.assertEqual(env["VGPU_LIMITS_FILE"], limits)
        self.assertEqual(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"], os.path.join(cdir, "region"))
        uuid = env["NVIDIA_VISIBLE_DEVICES"]
        self.assertTrue(uuid.startswith("GPU-"), uuid)
        self.assertIn(uuid, text)
        mounts = {m["containerPath"]: m for m in edits["mounts"]}
        # The limits directory, so that the fixed path /etc/vgpu/limits is the file.
        self.assertEqual(mounts["/etc/vgpu"]["hostPath"], os.path.dirname(limits))
        self.assertIn("ro", mounts["/etc/vgpu"]["options"])
        self.assertEqual(mounts["/etc/ld.so.preload"]["hostPath"],
                         os.path.join(self.tmp, "ld.so.preload"))
        # The plugin made that file at start (nobody else had), naming libvgpu.so.
        with open(os.path.join(self.tmp, "ld.so.preload")) as f:
            self.assertEqual(f.read(), os.path.join(BUILD, "lib", "libvgpu.so") + "\n")
        libvgpu = os.path.join(BUILD, "lib", "libvgpu.so")
        self.assertIn("ro", mounts[libvgpu]["options"])
        nodes = sorted(n["path"] for n in edits["deviceNodes"])
        self.assertEqual(nodes, ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
                                 "/dev/nvidiactl"])
        self.assertEqual(len(self.slots()), 1)
        self.assertEqual(self.api.get_count("default", "c1"), 1)

        # Again: the same answer from the checkpoint, nothing read or made twice.
        again = self.prepare(("default", UID1, "c1"))
        self.assertEqual(again.claims[UID1], r)
        self.assertEqual(self.api.get_count("default", "c1"), 1)
        self.assertEqual(self.claim_dirs(), [UID1 + "_gpu"])
        self.assertEqual([c["uid"] for c in self.checkpoint()["claims"]], [UID1])

        u = self.unprepare(("default", UID1, "c1"))
        self.assertEqual(u.claims[UID1].error, "")
        self.assertEqual(self.claim_dirs(), [])
        self.assertEqual(self.cdi_files(), [])
        self.assertEqual(self.slots(), [])
        self.assertEqual(self.checkpoint()["claims"], [])
        # Unprepare of a claim not prepared (kubelet retrying) is no error.
        u = self.unprepare(("default", UID1, "c1"))
        self.assertEqual(u.claims[UID1].error, "")

    def test_whole_gpus_two_requests(self):
        """No consumedCapacity: the whole GPU, no compute limit; one CDI device per
        request, subrequests counted as their parent."""
        self.start()
        self.api.put(claim(UID2, "two", [result(request="a", device="gpu-0"),
                                         result(request="b/small", device="gpu-1")]))
        r = self.prepare(("default", UID2, "two")).claims[UID2]
        self.assertEqual(r.error, "")
        ids = [list(d.cdi_device_ids) for d in r.devices]
        self.assertEqual(ids, [["vgpu.io/gpu=%s_a" % UID2], ["vgpu.io/gpu=%s_b" % UID2]])
        self.assertEqual([list(d.request_names) for d in r.devices], [["a"], ["b/small"]])
        self.assertFalse(r.devices[0].HasField("share_id"))
        spec = self.spec(UID2)
        env = [dict(e.split("=", 1) for e in d["containerEdits"]["env"]) for d in spec["devices"]]
        self.assertEqual(env[0]["CUDA_DEVICE_MEMORY_LIMIT_0"], "16384m")
        self.assertEqual(env[1]["CUDA_DEVICE_MEMORY_LIMIT_0"], "8192m")
        self.assertNotIn("CUDA_DEVICE_SM_LIMIT", env[0])
        self.assertEqual(self.slots(), [])
        self.assertEqual(self.claim_dirs(), [UID2 + "_a", UID2 + "_b"])

    def test_two_devices_one_request(self):
        """A request for two GPUs (the two-gpus-same-model example): one directory and one
        CDI device carrying both GPUs, returned for each device with its request."""
        self.start()
        self.api.put(claim(UID2, "pair", [result(request="gpus", device="gpu-0"),
                                          result(request="gpus", device="gpu-1")]))
        r = self.prepare(("default", UID2, "pair")).claims[UID2]
        self.assertEqual(r.error, "")
        self.assertEqual([(d.device_name, list(d.request_names), list(d.cdi_device_ids))
                          for d in r.devices],
                         [("gpu-0", ["gpus"], ["vgpu.io/gpu=%s_gpus" % UID2]),
                          ("gpu-1", ["gpus"], ["vgpu.io/gpu=%s_gpus" % UID2])])
        spec = self.spec(UID2)
        self.assertEqual(len(spec["devices"]), 1)
        edits = spec["devices"][0]["containerEdits"]
        env = dict(e.split("=", 1) for e in edits["env"])
        self.assertEqual((env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_1"]),
                         ("16384m", "8192m"))
        self.assertEqual(len(env["NVIDIA_VISIBLE_DEVICES"].split(",")), 2)
        nodes = [n["path"] for n in edits["deviceNodes"]]
        self.assertIn("/dev/nvidia0", nodes)
        self.assertIn("/dev/nvidia1", nodes)
        self.assertEqual(self.claim_dirs(), [UID2 + "_gpus"])

    def test_v1beta1(self):
        """The v1beta1 service prepares the same way, without share_id."""
        self.start()
        self.put_shared()
        r = self.prepare(("default", UID1, "c1"), version=V1BETA1).claims[UID1]
        self.assertEqual(r.error, "")
        self.assertFalse(r.devices[0].HasField("share_id"))
        u = self.unprepare(("default", UID1, "c1"), version=V1BETA1)
        self.assertEqual(u.claims[UID1].error, "")
        self.assertEqual(self.claim_dirs(), [])


class Startup(Base):
    """What a claim needs is made or checked at start: a start that succeeds never fails
    claims later for a missing directory, and one that cannot serve claims refuses to
    start, naming the flag to set."""

    def test_missing_directories_made_at_start(self):
        board = os.path.join(self.tmp, "host", "usr", "local", "vgpu", "compute-board")
        self.start(board=board)
        self.assertEqual(stat.S_IMODE(os.stat(board).st_mode), 0o755)
        self.api.put(claim(UID1, "c1", [result(memory="10Gi", cores="30", share=SHARE)]))
        resp = self.prepare(("default", UID1, "c1"))
        self.assertEqual(resp.claims[UID1].error, "")
        self.assertTrue(self.slots(), "no compute slot made under " + board)

    def test_missing_libvgpu_refused_at_start(self):
        p = Plugin.__new__(Plugin)
        missing = os.path.join(self.tmp, "no", "libvgpu.so")
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig, libvgpu=missing)
        p.log.close()
        self.assertIn("--libvgpu-path " + missing, str(ctx.exception))
        self.assertEqual(p.proc.returncode, 2)


class Restart(Base):
    """A restarted plugin answers from its checkpoint (no second API read, no second
    directory) and unprepares what the first run made; a checkpoint of another boot is
    released at start."""

    def test_restart_keeps_claims(self):
        self.start()
        self.api.put(claim(UID1, "c1", [result(memory="4Gi", cores="50")]))
        first = self.prepare(("default", UID1, "c1")).claims[UID1]
        self.plugin.stop(signal.SIGKILL)
        self.start()
        again = self.prepare(("default", UID1, "c1")).claims[UID1]
        self.assertEqual(again, first)
        self.assertEqual(self.api.get_count("default", "c1"), 1)
        self.assertEqual(self.claim_dirs(), [UID1 + "_gpu"])
        self.plugin.stop()
        self.start()
        self.assertEqual(self.unprepare(("default", UID1, "c1")).claims[UID1].error, "")
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), ([], [], []))

    def test_other_boot_released(self):
        self.start()
        self.api.put(claim(UID1, "c1", [result(memory="4Gi", cores="50")]))
        self.assertEqual(self.prepare(("default", UID1, "c1")).claims[UID1].error, "")
        self.plugin.stop()
        self.start(boot_id="boot-2")
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), ([], [], []))
        cp = self.checkpoint()
        self.assertEqual((cp["bootID"], cp["claims"]), ("boot-2", []))
        # Prepared anew on demand.
        self.assertEqual(self.prepare(("default", UID1, "c1")).claims[UID1].error, "")
        self.assertEqual(self.api.get_count("default", "c1"), 2)

    def test_killed_mid_prepare(self):
        """SIGKILL after a call made its claims' files but before it wrote the checkpoint:
        the restarted plugin removes those files (no claim is half there), and the
        claims are prepared anew, once."""
        self.start()
        refs = []
        for i in range(6):
            uid = "%08x-0000-4000-8000-%012x" % (0xc0000000 + i, i)
            self.api.put(claim(uid, "k%d" % i, [result(memory="1Gi", cores="10",
                                                       device="gpu-%d" % (i % 2))]))
            refs.append(("default", uid, "k%d" % i))
        self.api.delays[("default", "k5")] = 30  # the call waits for it; the rest is made
        ch = self.channel(self.plugin.svc_sock)
        fn = ch.unary_unary(V1 + "NodePrepareResources",
                            request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=M["NodePrepareResourcesResponse"].FromString)
        fut = fn.future(claims_msg("NodePrepareResourcesRequest", *refs), timeout=60)
        wait_for(lambda: len(self.claim_dirs()) == 5 and len(self.cdi_files()) == 5
                 and len(self.slots()) == 5, what="five claims' files")
        self.assertEqual(self.checkpoint()["claims"], [])
        self.plugin.stop(signal.SIGKILL)
        fut.cancel()
        self.api.delays.clear()
        self.start()
        self.assertIn("removed files of claims never checkpointed", self.plugin.output())
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), ([], [], []))
        got = self.prepare(*refs).claims
        self.assertTrue(all(got[r[1]].error == "" for r in refs), got)
        self.assertEqual(len(self.claim_dirs()), 6)
        self.assertEqual(len(self.cdi_files()), 6)
        self.assertEqual(len(self.checkpoint()["claims"]), 6)

    def test_garbled_checkpoint_refused(self):
        self.start()
        self.plugin.stop()
        with open(os.path.join(self.plugin.state_dir, "checkpoint.json"), "w") as f:
            f.write('{"version": 1, "bootID": "boot-1", "claims": [{"uid": "../../etc"}]}')
        p = Plugin.__new__(Plugin)
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig)
        p.log.close()
        self.assertIn("checkpoint: claim.uid missing or malformed", str(ctx.exception))


class Concurrent(Base):
    """Eight kubelet calls at once for two claims: every answer the same per claim, each
    claim read... prepared once."""

    def test_concurrent_prepares(self):
        self.start()
        self.api.put(claim(UID1, "c1", [result(memory="2Gi", cores="20")]))
        self.api.put(claim(UID2, "c2", [result(memory="2Gi", cores="20", device="gpu-1")]))
        self.api.delay = 0.2
        answers, errors = [], []

        def one(i):
            try:
                ch = grpc.insecure_channel("unix://" + self.plugin.svc_sock)
                req = claims_msg("NodePrepareResourcesRequest", ("default", UID1, "c1"),
                                 ("default", UID2, "c2"))
                answers.append(call(ch, V1 + "NodePrepareResources", req,
                                    "NodePrepareResourcesResponse"))
                ch.close()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(answers), 8)
        for a in answers:
            self.assertEqual(a.claims[UID1].error, "")
            self.assertEqual(a, answers[0])
        self.assertEqual(self.claim_dirs(), [UID1 + "_gpu", UID2 + "_gpu"])
        self.assertEqual(len(self.slots()), 2)
        self.assertEqual(sorted(c["uid"] for c in self.checkpoint()["claims"]), [UID1, UID2])


class Shutdown(Base):
    """SIGTERM while a claim is being read from the API: the plugin exits 0 with nothing
    leaked (the sanitizer build reports leaks at exit; Base.tearDown checks)."""

    def test_stop_with_read_in_flight(self):
        self.start()
        self.api.put(claim(UID1, "c1", [result(memory="1Gi", cores="10")]))
        self.api.delay = 30
        ch = self.channel(self.plugin.svc_sock)
        fn = ch.unary_unary(V1 + "NodePrepareResources",
                            request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=M["NodePrepareResourcesResponse"].FromString)
        fut = fn.future(claims_msg("NodePrepareResourcesRequest", ("default", UID1, "c1")),
                        timeout=60)
        wait_for(lambda: self.api.get_count("default", "c1") == 1, what="claim read started")
        self.assertEqual(self.plugin.stop(), 0, self.plugin.output()[-3000:])
        fut.cancel()
        self.assertNotIn("Sanitizer", self.plugin.output())


class BadInput(Base):
    """Malformed requests are refused whole (INVALID_ARGUMENT); a claim that cannot be
    prepared gets an error naming why, and leaves nothing behind."""

    def assert_clean(self):
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), ([], [], []))

    def test_malformed_requests(self):
        self.start()
        ch = self.service()
        for data in (b"\xff\xff\xff", b"\x0a\x05\x0a\x03"):
            with self.assertRaises(grpc.RpcError) as ctx:
                raw_call(ch, V1 + "NodePrepareResources", data)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        for bad in (("default", "../../etc", "c1"), ("Default", UID1, "c1"),
                    ("default", UID1, ""), ("default", UID1, "a/b")):
            for path, name in ((V1 + "NodePrepareResources", "NodePrepareResourcesRequest"),
                               (V1 + "NodeUnprepareResources",
                                "NodeUnprepareResourcesRequest")):
                with self.assertRaises(grpc.RpcError) as ctx:
                    raw_call(ch, path, claims_msg(name, bad).SerializeToString())
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, bad)
        self.assert_clean()
        self.assertEqual(self.plugin.proc.poll(), None)

    def test_claims_that_fail(self):
        self.start()
        cases = {
            "missing": None,
            "unalloc": claim(UID1, "unalloc", [], allocated=False),
            "otherpool": claim(UID1, "otherpool", [result(pool="node-2")]),
            "nodevice": claim(UID1, "nodevice", [result(device="gpu-7")]),
            "toobig": claim(UID1, "toobig", [result(memory="17Gi")]),
            "badmem": claim(UID1, "badmem", [result(memory="10GiB")]),
            "badcores": claim(UID1, "badcores", [result(memory="1Gi", cores="101")]),
            "twice": claim(UID1, "twice", [result(), result()]),
            "wronguid": claim(UID2, "wronguid", [result()]),
            "config": claim(UID1, "config", [result()]),
        }
        cases["config"]["status"]["allocation"]["devices"]["config"] = [
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"x": 1}}}]
        words = {"missing": "not found", "unalloc": "not allocated", "otherpool": "node-2",
                 "nodevice": "gpu-7", "toobig": "17408 MiB", "badmem": "memory",
                 "badcores": "cores", "twice": "twice", "wronguid": UID2,
                 "config": "opaque parameters for gpu.vgpu.io are not supported"}
        for name, obj in cases.items():
            if obj:
                self.api.put(obj)
            r = self.prepare(("default", UID1, name)).claims[UID1]
            self.assertIn(words[name], r.error, name)
            self.assertEqual(list(r.devices), [])
            self.assert_clean()
        self.assertEqual(self.checkpoint()["claims"], [])
        # A checkpoint that cannot be written: the claim is not answered as prepared, and
        # what was made for it is gone.
        self.api.put(claim(UID1, "ok", [result(memory="1Gi", cores="10")]))
        blocker = os.path.join(self.plugin.state_dir, "checkpoint.json.tmp")
        os.mkdir(blocker)
        r = self.prepare(("default", UID1, "ok")).claims[UID1]
        self.assertIn("checkpoint.json.tmp", r.error)
        self.assertEqual(list(r.devices), [])
        self.assert_clean()
        os.rmdir(blocker)
        self.assertEqual(self.prepare(("default", UID1, "ok")).claims[UID1].error, "")
        self.assertEqual(self.unprepare(("default", UID1, "ok")).claims[UID1].error, "")
        # Another driver's results are not ours: prepared with no devices.
        self.api.put(claim(UID1, "other", [result(driver="gpu.nvidia.com")]))
        r = self.prepare(("default", UID1, "other")).claims[UID1]
        self.assertEqual((r.error, list(r.devices)), ("", []))


class Attacks(Base):
    """What a tenant controls reaches the plugin as names: request names and the claim's
    own metadata, and (through the API) results naming pools and devices. None of it may
    make or remove a file outside the claim's own; one claim's unprepare never removes
    another's files."""

    def test_path_names_refused(self):
        self.start()
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        for i, r in enumerate((result(request="../../outside"), result(device="../outside"),
                               result(pool="../outside"), result(share="../../outside"))):
            self.api.put(claim(UID1, "evil%d" % i, [r]))
            got = self.prepare(("default", UID1, "evil%d" % i)).claims[UID1]
            self.assertIn("malformed", got.error)
        self.assertEqual(os.listdir(outside), [])
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), ([], [], []))

    def test_unprepare_touches_only_its_claim(self):
        self.start()
        self.api.put(claim(UID1, "c1", [result(memory="1Gi", cores="10")]))
        self.assertEqual(self.prepare(("default", UID1, "c1")).claims[UID1].error, "")
        before = (self.claim_dirs(), self.cdi_files(), self.slots())
        prefix = UID1[:-1] + "0"
        for uid in (UID2, prefix):
            self.assertEqual(self.unprepare(("default", uid, "c1")).claims[uid].error, "")
        self.assertEqual((self.claim_dirs(), self.cdi_files(), self.slots()), before)
        self.assertEqual([c["uid"] for c in self.checkpoint()["claims"]], [UID1])


class SliceBase(Base):
    """Tests against tests/kube_api_server.py, which validates slices as kube-apiserver does."""

    def setUp(self):
        super().setUp()
        self.kapi = None

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            if self.kapi:
                self.kapi.stop()

    def serve_api(self, port=0, version="1.36"):
        self.kapi = ApiServer(self.tmp, port, version)
        kubeconfig_for(self.kubeconfig, self.kapi.port)

    def ctl(self, *args):
        r = subprocess.run([os.path.join(BUILD, "bin", "fakegpu-ctl")] + list(args),
                           env=self.plugin.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)

    def devices(self):
        sl = self.kapi.slices()
        return {d["name"]: d for s in sl for d in s["spec"].get("devices", [])}, sl

    def generation(self, sl):
        gens = {s["spec"]["pool"]["generation"] for s in sl}
        self.assertEqual(len(gens), 1, sl)
        return gens.pop()


class Slices(SliceBase):
    """The plugin publishes the node's ResourceSlices to the API server (which validates
    them as kube-apiserver does): one device per healthy GPU with NVIDIA's attribute names
    and the capacities; a GPU that falls off the bus is taken out and comes back, each a
    new pool generation; an API server down at start is retried; a restart writes
    nothing new."""

    def test_published(self):
        self.serve_api()
        code, node = self.kapi.request("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
        self.assertEqual(code, 201, node)
        self.start()
        devs, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                            what="two devices published")
        self.assertEqual(len(sl), 1)
        spec = sl[0]["spec"]
        self.assertEqual((spec["driver"], spec["nodeName"], spec["pool"]["name"]),
                         (DRIVER, "node-1", "node-1"))
        self.assertEqual(spec["pool"]["resourceSliceCount"], 1)
        # Deleted with the Node.
        refs = sl[0]["metadata"]["ownerReferences"]
        self.assertEqual([(r["kind"], r["name"], r["uid"]) for r in refs],
                         [("Node", "node-1", node["metadata"]["uid"])])
        gpu0, gpu1 = devs["gpu-0"], devs["gpu-1"]
        self.assertEqual(gpu0["attributes"]["productName"], {"string": "Test GPU A"})
        self.assertEqual(gpu1["attributes"]["productName"], {"string": "Test GPU B"})
        self.assertTrue(gpu0["attributes"]["uuid"]["string"].startswith("GPU-"))
        self.assertEqual(gpu0["attributes"]["type"], {"string": "gpu"})
        self.assertEqual(gpu1["attributes"]["index"], {"int": 1})
        self.assertIn("version", gpu0["attributes"]["driverVersion"])
        self.assertIn("version", gpu0["attributes"]["cudaComputeCapability"])
        self.assertEqual(gpu0["capacity"]["memory"], {"value": "16384Mi"})
        self.assertEqual(gpu1["capacity"]["memory"], {"value": "8192Mi"})
        self.assertEqual(gpu0["capacity"]["cores"], {"value": "100"})
        self.assertNotIn("allowMultipleAllocations", gpu0)  # whole GPUs by default

    def test_consumable(self):
        self.serve_api()
        self.start(extra_args=["--consumable-capacity"])
        devs, _ = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                           what="two devices published")
        self.assertTrue(devs["gpu-0"]["allowMultipleAllocations"])
        # No Node object to own them: published all the same, without an owner.
        self.assertNotIn("ownerReferences", self.kapi.slices()[0]["metadata"])
        self.assertIn("cannot read the Node", self.plugin.output())
        policy = devs["gpu-0"]["capacity"]["memory"]["requestPolicy"]
        self.assertEqual(policy["validRange"]["step"], "256Mi")

    def test_bad_flag(self):
        p = Plugin.__new__(Plugin)
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig,
                            extra_args=["--consumable-capacity=maybe"])
        p.log.close()
        self.assertIn("--consumable-capacity takes true or false, not 'maybe'",
                      str(ctx.exception))

    def test_health_change(self):
        """Kubernetes 1.35 (no device taints by default): a lost GPU is taken out and comes
        back, each a new pool generation."""
        self.serve_api(version="1.35")
        self.start()
        _, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                         what="two devices published")
        gen = self.generation(sl)
        self.ctl("health", "1", "off")
        devs, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 1 else None)(self.devices()),
                            what="gpu-1 taken out")
        self.assertEqual(list(devs), ["gpu-0"])
        self.assertEqual(self.generation(sl), gen + 1)
        self.ctl("health", "1", "on")
        devs, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                            what="gpu-1 back")
        self.assertEqual(self.generation(sl), gen + 2)
        self.assertIn("API server without device taints", self.plugin.output())
        self.assertNotIn("taints", json.dumps(sl))

    def test_api_down_at_start(self):
        port = free_port()
        kubeconfig_for(self.kubeconfig, port)
        self.start()  # serving although nothing answers on the port
        time.sleep(0.5)
        self.assertIsNone(self.plugin.proc.poll())
        self.serve_api(port)
        wait_for(lambda: len(self.devices()[0]) == 2, timeout=30, what="published after retry")
        self.assertIsNone(self.plugin.proc.poll())

    def test_deleted_slice_put_back(self):
        self.serve_api()
        self.start(extra_env={"VGPU_DRA_RESYNC_MS": "200"})
        _, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                         what="two devices published")
        name = sl[0]["metadata"]["name"]
        code, body = self.kapi.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices/"
                                       + name)
        self.assertEqual(code, 200, body)
        _, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                         what="slice put back")
        self.assertEqual([s["metadata"]["name"] for s in sl], [name])

    def test_bad_resync_env(self):
        p = Plugin.__new__(Plugin)
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig, extra_env={"VGPU_DRA_RESYNC_MS": "x"})
        p.log.close()
        self.assertIn("VGPU_DRA_RESYNC_MS", str(ctx.exception))

    def test_restart_writes_nothing_new(self):
        self.serve_api()
        self.start()
        _, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                         what="two devices published")
        before = [(s["metadata"]["name"], s["metadata"]["resourceVersion"]) for s in sl]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            synced = self.plugin.output().count("ResourceSlices published")
            self.plugin.stop(sig)
            self.start()
            # Each run logs its first completed sync: the API server matched.
            wait_for(lambda: self.plugin.output().count("ResourceSlices published") > synced,
                     what="restarted plugin synced")
            sl = self.kapi.slices()
            self.assertEqual([(s["metadata"]["name"], s["metadata"]["resourceVersion"])
                              for s in sl], before)


class Mig(SliceBase):
    """A MIG-enabled GPU (fakegpu's FAKEGPU_MIG) is published as its MIG devices,
    gpu-<minor>-mig-<gi>-<ci>, and a claim allocated one of those names (as the scheduler
    takes it from the slice) is prepared whole: the MIG device's UUID visible, its parent's
    device node, no claim directory; the GPU's own name is not a device of this node."""

    H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"

    def put_claim(self, name, device):
        base = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "mig.vgpu.io"}}]}}}
        code, made = self.kapi.request("POST", base, obj)
        self.assertEqual(code, 201, made)
        made["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": device}]}}}
        code, body = self.kapi.request("PUT", "%s/%s/status" % (base, name), made)
        self.assertEqual(code, 200, body)
        return made["metadata"]["uid"]

    def test_mig_published_and_prepared(self):
        self.serve_api()
        self.start(extra_env={"FAKEGPU_DEVICES": self.H100 + ",Test GPU B:8GiB:80",
                              "FAKEGPU_MIG": "0:1g.10gb,3g.40gb"})
        devs, _ = wait_for(lambda: (lambda d: d if len(d[0]) == 3 else None)(self.devices()),
                           what="three devices published")
        self.assertEqual(sorted(devs), ["gpu-0-mig-1-0", "gpu-0-mig-2-0", "gpu-1"])
        mig = devs["gpu-0-mig-2-0"]["attributes"]
        self.assertEqual(mig["profile"], {"string": "3g.40gb"})
        uid = self.put_claim("m1", "gpu-0-mig-2-0")
        got = self.prepare(("default", uid, "m1")).claims[uid]
        self.assertEqual(got.error, "")
        self.assertEqual([(d.device_name, list(d.cdi_device_ids)) for d in got.devices],
                         [("gpu-0-mig-2-0", ["vgpu.io/gpu=%s_gpu" % uid])])
        edits = self.spec(uid)["devices"][0]["containerEdits"]
        self.assertIn("NVIDIA_VISIBLE_DEVICES=" + mig["uuid"]["string"], edits["env"])
        self.assertIn("/dev/nvidia0", [n["path"] for n in edits["deviceNodes"]])
        self.assertFalse(any("libvgpu" in m["hostPath"] for m in edits.get("mounts", [])))
        self.assertEqual(self.claim_dirs(), [])
        gpu = self.checkpoint()["claims"][0]["groups"][0]["gpus"][0]
        self.assertEqual((gpu["uuid"], gpu["cores"]), (mig["uuid"]["string"], 100))
        self.assertEqual("%dMi" % gpu["memoryMiB"], devs["gpu-0-mig-2-0"]["capacity"][
            "memory"]["value"])
        self.assertEqual(self.unprepare(("default", uid, "m1")).claims[uid].error, "")
        self.assertEqual((self.claim_dirs(), self.cdi_files()), ([], []))
        uid2 = self.put_claim("m2", "gpu-0")  # the GPU itself is not published
        self.assertIn("no device gpu-0", self.prepare(("default", uid2, "m2")).claims[uid2].error)


class Taints(SliceBase):
    """Kubernetes 1.36 (DRADeviceTaints on): an unhealthy GPU stays in the slice with a
    taint (docs/dra.md "Device taints"): an XID taints it <driver>/xid=<XID>:NoSchedule
    until the GPU is reset (lost and found again), a lost GPU <driver>/gpu-lost; the test
    API server's allocator then gives it only to a claim that tolerates the taint, and
    the taints clear when the GPU recovers."""

    CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"

    def taints(self, device):
        devs, sl = self.devices()
        return [(t["key"], t.get("value", ""), t["effect"])
                for t in devs.get(device, {}).get("taints", [])], sl

    def wait_taints(self, device, want, what):
        return wait_for(lambda: (lambda t: t if t[0] == want else None)(self.taints(device)),
                        what=what)[1]

    def make_claim(self, name, tolerations=None):
        exactly = {"deviceClassName": "gpu.vgpu.io"}
        if tolerations is not None:
            exactly["tolerations"] = tolerations
        code, body = self.kapi.request("POST", self.CLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
        return code, body

    def allocate(self, name):
        code, body = self.kapi.request("POST", "/admin/allocate",
                                       {"namespace": "default", "name": name, "node": "node-1"})
        if code != 200:
            return code, body.get("message")
        return code, [r["device"] for r in body["status"]["allocation"]["devices"]["results"]]

    def test_xid_taint_toleration_and_recovery(self):
        self.serve_api()
        self.start()
        _, sl = wait_for(lambda: (lambda d: d if len(d[0]) == 2 else None)(self.devices()),
                         what="two devices published")
        gen = self.generation(sl)
        self.assertEqual(self.taints("gpu-1")[0], [])
        self.ctl("xid", "1", "79")
        sl = self.wait_taints("gpu-1", [(DRIVER + "/xid", "79", "NoSchedule")], "XID taint")
        self.assertEqual(self.generation(sl), gen + 1)
        self.assertEqual(self.taints("gpu-0")[0], [])  # only the GPU that reported it
        devs, _ = self.devices()
        self.assertRegex(devs["gpu-1"]["taints"][0]["timeAdded"],
                         r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        # An XID that is not critical (NVIDIA's ignored list: 13, application error) taints
        # nothing.
        self.ctl("xid", "0", "13")
        time.sleep(0.5)
        self.assertEqual(self.taints("gpu-0")[0], [])
        # gpu-0 taken; a claim without a toleration finds no device, one tolerating the
        # XID taint gets gpu-1.
        for name in ("first", "plain", "tolerant"):
            tol = [{"key": DRIVER + "/xid", "operator": "Exists", "effect": "NoSchedule"}] \
                if name == "tolerant" else None
            code, body = self.make_claim(name, tol)
            self.assertEqual(code, 201, body)
        self.assertEqual(self.allocate("first"), (200, ["gpu-0"]))
        code, why = self.allocate("plain")
        self.assertEqual(code, 409, why)
        self.assertIn("request gpu wants 1 devices, 0 fit", why)
        self.assertEqual(self.allocate("tolerant"), (200, ["gpu-1"]))
        # The plugin prepares the tolerated device like any other.
        code, claim_obj = self.kapi.request("GET", self.CLAIMS + "/tolerant")
        uid = claim_obj["metadata"]["uid"]
        self.assertEqual(self.prepare(("default", uid, "tolerant")).claims[uid].error, "")
        # Still answering NVML: the XID stays. Reset (lost, then back): both clear.
        self.ctl("health", "1", "off")
        self.wait_taints("gpu-1", [(DRIVER + "/xid", "79", "NoSchedule"),
                                   (DRIVER + "/gpu-lost", "", "NoSchedule")], "lost too")
        self.ctl("health", "1", "on")
        sl = self.wait_taints("gpu-1", [], "taints cleared after the reset")
        self.assertEqual(len(self.devices()[0]), 2)
        self.assertIn("GPU healthy: its taints cleared", self.plugin.output())
        self.assertEqual(self.unprepare(("default", uid, "tolerant")).claims[uid].error, "")

    def test_lost_gpu_stays_listed(self):
        self.serve_api()
        self.start()
        wait_for(lambda: len(self.devices()[0]) == 2, what="two devices published")
        self.ctl("health", "0", "off")
        self.wait_taints("gpu-0", [(DRIVER + "/gpu-lost", "", "NoSchedule")], "lost taint")
        self.assertEqual(sorted(self.devices()[0]), ["gpu-0", "gpu-1"])
        self.assertIn("API server has device taints", self.plugin.output())
        self.ctl("health", "0", "on")
        self.wait_taints("gpu-0", [], "lost taint cleared")

    def test_unmonitored(self):
        """Health checks off (DP_DISABLE_HEALTHCHECKS=all): every GPU says so with a None
        taint, which keeps no claim away."""
        self.serve_api()
        self.start(extra_env={"DP_DISABLE_HEALTHCHECKS": "all"})
        self.wait_taints("gpu-0", [(DRIVER + "/unmonitored", "", "None")], "unmonitored")
        code, body = self.make_claim("any")
        self.assertEqual(code, 201, body)
        self.assertEqual(self.allocate("any"), (200, ["gpu-0"]))

    def test_forced_off(self):
        """--device-taints=false on a 1.36 server: left out as before."""
        self.serve_api()
        self.start(extra_args=["--device-taints=false"])
        wait_for(lambda: len(self.devices()[0]) == 2, what="two devices published")
        self.ctl("health", "1", "off")
        wait_for(lambda: list(self.devices()[0]) == ["gpu-0"], what="gpu-1 taken out")

    def test_bad_flag(self):
        p = Plugin.__new__(Plugin)
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig, extra_args=["--device-taints=maybe"])
        p.log.close()
        self.assertIn("--device-taints", str(ctx.exception))


WATCH = "/v1alpha1.DRAResourceHealth/NodeWatchResources"


class Health(SliceBase):
    """KEP-4680: kubelet's health stream (NodeWatchResources, listed in the registration as
    v1alpha1.DRAResourceHealth) carries every device of the node with its GPU's health,
    again after each health poll; the stand-in maps it onto the pod's
    allocatedResourcesStatus as kubelet does (claim:<claim>/<request>, resourceID
    <driver>/<pool>/<device>)."""

    CLAIMS = Taints.CLAIMS
    make_claim = Taints.make_claim
    allocate = Taints.allocate
    wait_taints = Taints.wait_taints
    taints = Taints.taints

    def watch(self):
        fn = self.channel(self.plugin.svc_sock).unary_stream(
            WATCH, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=M["NodeWatchResourcesResponse"].FromString)
        return fn(M["NodeWatchResourcesRequest"](), timeout=90)

    @staticmethod
    def states(msg):
        names = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}
        return {(d.device.pool_name, d.device.device_name): names[d.health] for d in msg.devices}

    def next_matching(self, stream, pred, what):
        for msg in stream:
            if pred(self.states(msg)):
                return msg
        raise AssertionError("stream ended before " + what)

    @staticmethod
    def allocated_resources_status(claim_obj, msg):
        """What kubelet writes into containerStatuses[].allocatedResourcesStatus for a
        container using claim_obj: one entry per request, one resource per device."""
        health = {(d.device.pool_name, d.device.device_name): d.health for d in msg.devices}
        names = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}
        out = {}
        for r in claim_obj["status"]["allocation"]["devices"]["results"]:
            entry = out.setdefault("claim:%s/%s" % (claim_obj["metadata"]["name"], r["request"]),
                                   [])
            entry.append({"resourceID": "%s/%s/%s" % (r["driver"], r["pool"], r["device"]),
                          "health": names[health.get((r["pool"], r["device"]), 0)]})
        return [{"name": k, "resources": v} for k, v in sorted(out.items())]

    def test_stream_follows_health(self):
        self.serve_api()
        self.start()
        stream = self.watch()
        first = next(stream)
        self.assertEqual(self.states(first), {("node-1", "gpu-0"): "Healthy",
                                              ("node-1", "gpu-1"): "Healthy"})
        now = time.time()
        self.assertTrue(all(now - 60 < d.last_updated_time <= now + 1 for d in first.devices))
        code, body = self.make_claim("train")
        self.assertEqual(code, 201, body)
        self.assertEqual(self.allocate("train"), (200, ["gpu-0"]))
        _, claim_obj = self.kapi.request("GET", self.CLAIMS + "/train")
        self.assertEqual(self.allocated_resources_status(claim_obj, first), [
            {"name": "claim:train/gpu",
             "resources": [{"resourceID": DRIVER + "/node-1/gpu-0", "health": "Healthy"}]}])
        self.ctl("xid", "0", "79")
        msg = self.next_matching(stream, lambda s: s[("node-1", "gpu-0")] == "Unhealthy",
                                 "gpu-0 unhealthy")
        self.assertEqual(self.states(msg)[("node-1", "gpu-1")], "Healthy")
        self.assertEqual(self.allocated_resources_status(claim_obj, msg)[0]["resources"][0][
            "health"], "Unhealthy")
        # Sent again at every poll (kubelet takes a device not reported for a while as
        # Unknown): more messages come with nothing changed.
        t0 = time.time()
        for _ in range(3):
            next(stream)
        self.assertLess(time.time() - t0, 5)
        self.ctl("health", "0", "off")
        self.wait_taints("gpu-0", [(DRIVER + "/xid", "79", "NoSchedule"),
                                   (DRIVER + "/gpu-lost", "", "NoSchedule")], "lost seen")
        self.ctl("health", "0", "on")
        self.next_matching(stream, lambda s: s[("node-1", "gpu-0")] == "Healthy",
                           "gpu-0 healthy after the reset")
        # A second watcher gets the list at once; closing the first leaves it served.
        second = self.watch()
        self.assertEqual(len(next(second).devices), 2)
        stream.cancel()
        self.assertEqual(len(next(second).devices), 2)
        second.cancel()

    def test_unmonitored_is_unknown(self):
        self.serve_api()
        self.start(extra_env={"DP_DISABLE_HEALTHCHECKS": "all"})
        self.assertEqual(set(self.states(next(self.watch())).values()), {"Unknown"})

    def test_malformed_request(self):
        self.start()
        fn = self.channel(self.plugin.svc_sock).unary_stream(
            WATCH, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as ctx:
            next(fn(b"\xff\xff\xff", timeout=10))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIsNone(self.plugin.proc.poll())


class NvmlPeek:
    """fakegpu's NVML through ctypes, as another process on the node sees it."""

    def __init__(self, env):
        import ctypes
        os.environ["FAKEGPU_STATE_DIR"] = env["FAKEGPU_STATE_DIR"]
        os.environ["FAKEGPU_DEVICES"] = env["FAKEGPU_DEVICES"]
        os.environ["FAKEGPU_MIG"] = env.get("FAKEGPU_MIG", "")
        self.ct = ctypes
        self.lib = ctypes.CDLL(os.path.join(BUILD, "fakegpu", "libnvidia-ml.so.1"))
        assert self.lib.nvmlInit_v2() == 0

    def memory_mib(self, uuid):
        """The device's total memory in MiB, or None when NVML does not know the UUID."""
        ct = self.ct
        handle = ct.c_void_p()
        if self.lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ct.byref(handle)) != 0:
            return None
        mem = (ct.c_ulonglong * 3)()
        if self.lib.nvmlDeviceGetMemoryInfo(handle, ct.byref(mem)) != 0:
            return None
        return mem[0] >> 20


class Partitions(SliceBase):
    """KEP-4815 on fakegpu's H100 in MIG mode with no instances (FAKEGPU_MIG=0:) and
    --mig-mode=dynamic: a counter set in a slice of its own, the whole GPU and every
    (profile, placement) as devices consuming it; a claim for a partition gets its
    instance made in NodePrepareResources (the MIG device in its CDI spec, NVML seeing it
    with the profile's memory), NodeUnprepareResources destroys it and only it; a plugin
    killed between the GPU instance and the compute instance leaves nothing once
    restarted; a 1.35 API server gets today's static slices."""

    H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"
    CLAIMS = Taints.CLAIMS
    make_claim = Taints.make_claim
    watch = Health.watch
    states = staticmethod(Health.states)

    def env(self, **extra):
        env = {"FAKEGPU_DEVICES": self.H100 + ",Test GPU B:8GiB:80", "FAKEGPU_MIG": "0:"}
        env.update(extra)
        return env

    def mig_records(self):
        path = os.path.join(self.plugin.state_dir, "mig.json")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return json.load(f)["instances"]

    def claim_for(self, name, device):
        code, body = self.make_claim(name)
        self.assertEqual(code, 201, body)
        code, body = self.kapi.request("POST", "/admin/allocate", {
            "namespace": "default", "name": name, "node": "node-1",
            "devices": {"gpu": [device]}})
        self.assertEqual(code, 200, body)
        return body["metadata"]["uid"]

    def published(self):
        devs, sl = self.devices()
        sets = [cs for s in sl for cs in s["spec"].get("sharedCounters", [])]
        return devs, sets, sl

    def test_partitions_made_and_destroyed(self):
        self.serve_api()
        self.start(extra_args=["--mig-mode=dynamic"], extra_env=self.env())
        devs, sets, sl = wait_for(lambda: (lambda p: p if p[1] else None)(self.published()),
                                  what="counter set published")
        self.assertIn("MIG GPUs published as partitions", self.plugin.output())
        self.assertEqual([cs["name"] for cs in sets], ["gpu-0-counters"])
        counters = sets[0]["counters"]
        self.assertEqual(sorted(k for k in counters if k.startswith("memory-slice-")),
                         ["memory-slice-%d" % i for i in range(8)])
        self.assertEqual(counters["multiprocessors"], {"value": "132"})
        # Counters and devices never share a slice; every slice is one pool's.
        self.assertTrue(all(not (s["spec"].get("devices") and s["spec"].get("sharedCounters"))
                            for s in sl))
        self.assertEqual({s["spec"]["pool"]["resourceSliceCount"] for s in sl}, {len(sl)})
        parts = sorted(d for d in devs if d.startswith("gpu-0-mig-"))
        # NVML's H100 placements: 7 + 7 (+me) + 4 + 3 + 2 + 1 + 1.
        self.assertEqual(len(parts), 25, parts)
        p9 = devs["gpu-0-mig-p9-s4"]
        self.assertEqual(p9["attributes"]["profile"], {"string": "3g.40gb"})
        self.assertEqual(p9["attributes"]["placementStart"], {"int": 4})
        used = p9["consumesCounters"][0]["counters"]
        self.assertEqual(sorted(k for k in used if k.startswith("memory-slice-")),
                         ["memory-slice-%d" % i for i in range(4, 8)])
        self.assertEqual(len(devs["gpu-0"]["consumesCounters"][0]["counters"]), 10)
        self.assertNotIn("consumesCounters", devs["gpu-1"])
        # kubelet's health stream names the devices as the slices do.
        health = self.states(next(self.watch()))
        self.assertEqual(sorted(d for _, d in health), sorted(devs))
        self.assertEqual(health[("node-1", "gpu-0-mig-p9-s4")], "Healthy")
        # Two claims: 3g.40gb at 4 and 1g.10gb at 0; the whole GPU no longer fits.
        nv = NvmlPeek(self.plugin.env)
        uid_a = self.claim_for("big", "gpu-0-mig-p9-s4")
        uid_b = self.claim_for("small", "gpu-0-mig-p19-s0")
        code, body = self.make_claim("whole")
        self.assertEqual(code, 201, body)
        code, body = self.kapi.request("POST", "/admin/allocate", {
            "namespace": "default", "name": "whole", "devices": {"gpu": ["gpu-0"]}})
        self.assertEqual(code, 409, body)
        got = self.prepare(("default", uid_a, "big"), ("default", uid_b, "small")).claims
        self.assertEqual((got[uid_a].error, got[uid_b].error), ("", ""))
        self.assertEqual([d.device_name for d in got[uid_a].devices], ["gpu-0-mig-p9-s4"])
        uuids = {}
        for uid, mib in ((uid_a, 40448), (uid_b, 9984)):
            env = self.spec(uid)["devices"][0]["containerEdits"]["env"]
            uuid = [e.split("=", 1)[1] for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")][0]
            self.assertTrue(uuid.startswith("MIG-"), env)
            self.assertEqual(nv.memory_mib(uuid), mib)  # the container's MIG device
            uuids[uid] = uuid
        self.assertEqual(sorted(r["claim"] for r in self.mig_records()), sorted([uid_a, uid_b]))
        # Unprepare destroys that claim's instance only.
        self.assertEqual(self.unprepare(("default", uid_a, "big")).claims[uid_a].error, "")
        self.assertIsNone(nv.memory_mib(uuids[uid_a]))
        self.assertEqual(nv.memory_mib(uuids[uid_b]), 9984)
        self.assertEqual([r["claim"] for r in self.mig_records()], [uid_b])
        # A restart keeps the prepared claim's instance.
        self.start(extra_args=["--mig-mode=dynamic"], extra_env=self.env())
        self.assertEqual(nv.memory_mib(uuids[uid_b]), 9984)
        self.assertEqual(self.unprepare(("default", uid_b, "small")).claims[uid_b].error, "")
        self.assertIsNone(nv.memory_mib(uuids[uid_b]))
        self.assertEqual(self.mig_records(), [])

    def test_killed_between_gpu_and_compute_instance(self):
        self.serve_api()
        self.start(extra_args=["--mig-mode=dynamic"],
                   extra_env=self.env(VGPU_DRA_TEST_GI_PAUSE_MS="20000"))
        wait_for(lambda: self.published()[1], what="counter set published")
        uid = self.claim_for("cut", "gpu-0-mig-p9-s0")
        ch = self.channel(self.plugin.svc_sock)
        fn = ch.unary_unary(V1 + "NodePrepareResources",
                            request_serializer=lambda m: m.SerializeToString(),
                            response_deserializer=M["NodePrepareResourcesResponse"].FromString)
        fut = fn.future(claims_msg("NodePrepareResourcesRequest", ("default", uid, "cut")),
                        timeout=60)
        rec = wait_for(lambda: [r for r in self.mig_records() if r["gi"] >= 0],
                       what="the GPU instance made")[0]
        self.assertEqual((rec["ci"], rec["uuid"]), (-1, ""))
        self.plugin.stop(signal.SIGKILL)
        fut.cancel()
        self.start(extra_args=["--mig-mode=dynamic"], extra_env=self.env())
        self.assertIn("destroyed MIG instances of claims never prepared", self.plugin.output())
        self.assertEqual(self.mig_records(), [])
        # Nothing left at that placement: the claim's instance is made there again.
        got = self.prepare(("default", uid, "cut")).claims[uid]
        self.assertEqual(got.error, "")
        self.assertEqual(len(self.mig_records()), 1)

    def test_placement_taken_refused(self):
        """Two claims whose partitions overlap (the tests' allocator would not allocate
        them, a stale allocation could): NVML refuses the second, which gets the reason
        and leaves nothing behind."""
        self.serve_api()
        self.start(extra_args=["--mig-mode=dynamic"], extra_env=self.env())
        wait_for(lambda: self.published()[1], what="counter set published")
        uid_a = self.claim_for("a", "gpu-0-mig-p9-s0")
        self.assertEqual(self.prepare(("default", uid_a, "a")).claims[uid_a].error, "")
        code, body = self.make_claim("b")
        code, b = self.kapi.request("GET", self.CLAIMS + "/b")
        b["status"] = {"allocation": {"devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0-mig-p19-s1"}]}}}
        code, body = self.kapi.request("PUT", self.CLAIMS + "/b/status", b)
        self.assertEqual(code, 200, body)
        uid_b = b["metadata"]["uid"]
        err = self.prepare(("default", uid_b, "b")).claims[uid_b].error
        self.assertIn("Insufficient", err)
        self.assertEqual([r["claim"] for r in self.mig_records()], [uid_a])

    def test_old_api_server_static(self):
        self.serve_api(version="1.35")
        self.start(extra_args=["--mig-mode=dynamic"], extra_env=self.env())
        devs, sets, _ = wait_for(lambda: (lambda p: p if "gpu-1" in p[0] else None)(
            self.published()), what="slices published")
        self.assertEqual(sets, [])
        self.assertEqual(sorted(devs), ["gpu-1"])  # no instances: nothing of gpu-0 yet
        self.assertIn("without partitionable devices", self.plugin.output())

    def test_bad_mig_mode(self):
        p = Plugin.__new__(Plugin)
        with self.assertRaises(AssertionError) as ctx:
            Plugin.__init__(p, self.tmp, self.kubeconfig, extra_args=["--mig-mode=auto"])
        p.log.close()
        self.assertIn("--mig-mode", str(ctx.exception))


if __name__ == "__main__":
    BUILD, SOURCE, desc = sys.argv[1], sys.argv[2], sys.argv[3]
    load_messages(desc)
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
