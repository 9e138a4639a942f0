"""vgpu's DRA driver end to end on fakegpu: a claim for 10 GiB and 30 % of a GPU is prepared
by vgpu-dra-plugin, podman applies the CDI spec the plugin wrote (`--device
vgpu.io/gpu=<claim uid>_<request>`), and the CUDA programs inside see a 10 GiB GPU, are
refused memory past it and get 30 % of the GPU's time.

    /usr/bin/python3 e2e_podman.py BUILD_DIR SOURCE_DIR DESCRIPTOR [EndToEnd | Attacks]

Attacks: a tenant root in its container cannot change the files the spec mounts or raise
its limits through its environment.

The pieces are the ones a node runs: the test API server (tests/kube_api_server.py) holds
the claim, written as kube-scheduler leaves it (created, then its status.allocation with the
consumed capacity); kubelet's calls, made as tests/dra/dra_kubelet.py makes them
(python3-grpcio, the plugin's own .proto files), find the plugin through its registration
socket and call NodePrepareResources / NodeUnprepareResources; podman 4.3 (runc, cgroupfs,
no network, its storage in the test's directory) runs a root file system holding only the
programs, their libraries and fakegpu's libcuda / libnvidia-ml where the NVIDIA container
toolkit puts the driver's. Everything else a container gets — libvgpu.so,
/etc/ld.so.preload, the limits, the counters region, the compute board and slot, the
/dev/nvidia* nodes, the environment — comes from the CDI spec alone. fakegpu's state
directory is mounted at the same path and the container shares the host's pid namespace, so
fakegpu's timeline (the truth the compute-share tests read,
tests/integration/libvgpu_compute_truth.c) names its processes by their host pids.

podman 4.3 reads CDI specs from /etc/cdi and /var/run/cdi only (no cdi_spec_dirs in its
containers.conf, no flag), so the test runs in a private mount namespace (unshare) with the
plugin's --cdi-dir bound over /run/cdi; the host's /run/cdi is created empty when missing.
The device nodes the spec names are made with mknod under the plugin's --nvidia-dev-root
(NVIDIA's numbers; nothing opens them: fakegpu needs no device), because CDI resolves each
node's type and numbers from its host path.

Skips (CTest's skip code) where it cannot run: not root, no podman/runc/unshare, podman
unable to run a container, python3-grpcio missing; fails instead under CI
(tests/lib/vg_skip.py).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import vg_skip  # noqa: E402

NS_MARK = "VGPU_DRA_E2E_NAMESPACE"
CDI_RUN_DIR = "/run/cdi"  # /var/run/cdi, one of podman's two CDI directories


def preflight():
    """None when the test can run here, else what is missing."""
    if os.geteuid() != 0:
        return "root (podman, mknod and mount namespaces)"
    for tool in ("podman", "runc", "unshare", "mount"):
        if not shutil.which(tool):
            return "%s (Debian packages podman, runc, util-linux)" % tool
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        return "a private mount namespace (unshare: %s)" % r.stdout.strip()[-200:]
    return None


if os.environ.get(NS_MARK) != "1":
    why = preflight()
    if why:
        vg_skip.skip(why)
    os.makedirs(CDI_RUN_DIR, exist_ok=True)
    env = dict(os.environ, **{NS_MARK: "1"})
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private", "--",
                           sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)

try:
    import grpc
    import vg_proto  # google.protobuf: skipped below when missing
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-grpcio (%s; run with /usr/bin/python3)" % exc)

BUILD = SOURCE = None
DRIVER = "gpu.vgpu.io"
NODE = "node-e2e"
GIB = 1 << 30
DEVICES = "Test GPU:40GiB:16"  # bigger than the claim; 16 SMs as the compute tests
# Compute share: the bounds of tests/integration/libvgpu_compute_test.sh (3 windows of 1 s
# after 1 s of warm-up, 3 points). The tenant is asked to run far longer than that, however
# late podman hands its pid back, is seen still running when the windows are over, and is
# then removed.
WINDOWS = 3
TOL = 3.0
TENANT_MS = 120000
PODMAN_RUN = ["run", "--network", "none", "--ulimit", "nofile=1024:1024",
              "--ulimit", "nproc=4096:4096", "--pid", "host"]
# NVIDIA's device numbers: the GPU (195, minor), nvidiactl (195, 255), nvidia-uvm (a
# dynamic major, 510 here) and nvidia-uvm-tools.
NODES = {"nvidia0": (195, 0), "nvidiactl": (195, 255), "nvidia-uvm": (510, 0),
         "nvidia-uvm-tools": (510, 1)}


V1 = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
M = {}  # message name -> class, from the plugin's own .proto files (DESCRIPTOR)


def load_messages(path):
    vg_proto.load_messages(path, M)


def call(channel, path, request, response_name, timeout=20):
    fn = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                             response_deserializer=M[response_name].FromString)
    return fn(request, timeout=timeout)


def claims_msg(name, *claims):
    req = M[name]()
    for ns, uid, cname in claims:
        c = req.claims.add()
        c.namespace, c.uid, c.name = ns, uid, cname
    return req


def wait_for(pred, timeout=15.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, **kw)


def api_call(port, method, path, body=None):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = json.loads(resp.read() or b"null")
    conn.close()
    return resp.status, payload


def copy_into(root, host_path, container_path=None):
    dest = os.path.join(root, (container_path or host_path).lstrip("/"))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(host_path, dest)


def copy_with_libs(root, host_path, container_path, env):
    """A program and the shared libraries ldd finds for it (fakegpu's at the driver's
    place, /usr/lib/x86_64-linux-gnu)."""
    copy_into(root, host_path, container_path)
    out = run(["ldd", host_path], env=env).stdout
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0]
        if not path.startswith("/"):
            if "not found" in line:
                raise AssertionError("ldd %s: %s" % (host_path, line.strip()))
            continue
        if path.startswith(BUILD):
            copy_into(root, path, "/usr/lib/x86_64-linux-gnu/" + os.path.basename(path))
        else:
            copy_into(root, os.path.realpath(path), path)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vgpu-dra-e2e-")
        self.procs = []
        self.channels = []
        self.containers = []
        # The plugin's CDI directory is where podman looks, in this mount namespace only.
        self.cdi_dir = os.path.join(self.tmp, "cdi")
        os.makedirs(self.cdi_dir)
        r = run(["mount", "--bind", self.cdi_dir, CDI_RUN_DIR])
        self.assertEqual(r.returncode, 0, r.stdout)
        self.fake_env = {"FAKEGPU_DEVICES": DEVICES,
                         "FAKEGPU_STATE_DIR": os.path.join(self.tmp, "fakegpu")}
        os.makedirs(self.fake_env["FAKEGPU_STATE_DIR"])
        storage = os.path.join(self.tmp, "storage")
        self.podman = ["podman", "--root", os.path.join(storage, "root"),
                       "--runroot", os.path.join(storage, "run"), "--tmpdir",
                       os.path.join(storage, "tmp"), "--storage-driver", "vfs",
                       "--runtime", "runc", "--cgroup-manager", "cgroupfs",
                       "--events-backend", "none"]
        self.rootfs = self.make_rootfs()

    def tearDown(self):
        for ch in self.channels:
            ch.close()
        for name in self.containers:
            run(self.podman + ["rm", "-f", name])
        out, rcs = "", {}
        for p, log in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            rcs[os.path.basename(log.name)] = p.returncode
            log.seek(0)
            out += log.read()
            log.close()
        if not getattr(self._outcome, "success", True):
            print(out[-6000:], file=sys.stderr)
        run(["umount", CDI_RUN_DIR])
        run(self.podman + ["system", "reset", "-f"])
        shutil.rmtree(self.tmp, ignore_errors=True)
        # Stopped by SIGTERM, the plugin exits 0.
        self.assertIn(rcs.get("plugin.log", 0), (0,), out[-3000:])

    def make_rootfs(self):
        root = os.path.join(self.tmp, "rootfs")
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "fakegpu"))
        for prog in ("libvgpu_probe", "compute_tenant"):
            copy_with_libs(root, os.path.join(BUILD, "bin", prog), "/usr/local/bin/" + prog, env)
        # A shell for the tenant of the attack cases.
        copy_with_libs(root, os.path.realpath(shutil.which("sh")), "/bin/sh", env)
        for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
            copy_with_libs(root, os.path.join(BUILD, "fakegpu", lib),
                           "/usr/lib/x86_64-linux-gnu/" + lib, env)
        # libvgpu.so comes from the CDI spec; what it links comes from the image.
        copy_with_libs(root, os.path.join(BUILD, "lib", "libvgpu.so"), "/tmp/libvgpu.so", env)
        os.unlink(os.path.join(root, "tmp", "libvgpu.so"))
        return root

    def start(self, cmd, env, name):
        log = open(os.path.join(self.tmp, name + ".log"), "w+")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append((p, log))
        return p, log

    def start_api(self):
        port_file = os.path.join(self.tmp, "api.port")
        self.start(["/usr/bin/python3", os.path.join(SOURCE, "tests", "kube_api_server.py"),
                    "--port", "0", "--port-file", port_file], dict(os.environ), "api")
        wait_for(lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0,
                    what="test API server")
        with open(port_file) as f:
            port = int(f.read())
        kubeconfig = os.path.join(self.tmp, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                    "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
                    "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                    "users:\n- name: u\n  user:\n    token: x\n" % port)
        return port, kubeconfig

    def start_plugin(self, kubeconfig, extra=()):
        devroot = os.path.join(self.tmp, "devroot")
        os.makedirs(os.path.join(devroot, "dev"))
        for name, (major, minor) in NODES.items():
            os.mknod(os.path.join(devroot, "dev", name), 0o666 | 0o020000,
                     os.makedev(major, minor))
        with open(os.path.join(self.tmp, "boot_id"), "w") as f:
            f.write("boot-e2e\n")
        # libvgpu.so as a node installs it: a copy of the build's (the attack cases write
        # at it).
        self.libvgpu = os.path.join(self.tmp, "vgpu", "libvgpu.so")
        os.makedirs(os.path.dirname(self.libvgpu))
        shutil.copy2(os.path.join(BUILD, "lib", "libvgpu.so"), self.libvgpu)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "fakegpu"),
                   VGPU_DRA_BOOT_ID_FILE=os.path.join(self.tmp, "boot_id"), **self.fake_env)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.kubelet_dir = os.path.join(self.tmp, "kubelet")
        self.state_dir = os.path.join(self.tmp, "state")
        self.board = os.path.join(self.tmp, "board")
        cmd = [os.path.join(BUILD, "bin", "vgpu-dra-plugin"), "--node-name", NODE,
               "--kubelet-dir", self.kubelet_dir, "--kubeconfig", kubeconfig,
               "--cdi-dir", self.cdi_dir, "--state-dir", self.state_dir,
               "--compute-board-dir", self.board, "--nvidia-dev-root", devroot,
               "--libvgpu-path", self.libvgpu,
               "--ld-so-preload-path", os.path.join(self.tmp, "ld.so.preload")] + list(extra)
        p, log = self.start(cmd, env, "plugin")
        reg = os.path.join(self.kubelet_dir, "plugins_registry", DRIVER + "-reg.sock")
        wait_for(lambda: os.path.exists(reg) or p.poll() is not None,
                    what="registration socket")
        self.assertIsNone(p.poll(), "the plugin exited")
        return reg

    def channel(self, path):
        ch = grpc.insecure_channel("unix://" + path,
                                      options=[("grpc.use_local_subchannel_pool", 1)])
        self.channels.append(ch)
        return ch

    def put_claim(self, port, name="train-gpu", memory="10Gi", cores="30"):
        """The claim as a pod's template makes it, then allocated as kube-scheduler does
        with consumable capacity: MEMORY and CORES of gpu-0 in this node's pool."""
        base = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": name, "namespace": "default"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     "deviceClassName": "shared.gpu.vgpu.io",
                     "capacity": {"requests": {"memory": memory, "cores": cores}}}}]}}}
        code, obj = api_call(port, "POST", base, claim)
        self.assertEqual(code, 201, obj)
        obj["status"] = {"allocation": {"devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"memory": memory, "cores": cores}}]}}}
        code, obj = api_call(port, "PUT", base + "/%s/status" % name, obj)
        self.assertEqual(code, 200, obj)
        return obj["metadata"]["uid"]

    def register(self, reg):
        """Kubelet's plugin watcher: GetInfo on the registration socket names the
        endpoint; the DRA service there."""
        info = call(self.channel(reg), "/pluginregistration.Registration/GetInfo",
                       M["InfoRequest"](), "PluginInfo")
        self.assertEqual((info.type, info.name), ("DRAPlugin", DRIVER))
        call(self.channel(reg), "/pluginregistration.Registration/NotifyRegistrationStatus",
                M["RegistrationStatus"](plugin_registered=True), "RegistrationStatusResponse")
        return self.channel(info.endpoint)

    def prepare(self, svc, uid, name):
        """NodePrepareResources (v1) for one claim: its one CDI ID."""
        resp = call(svc, V1 + "NodePrepareResources",
                       claims_msg("NodePrepareResourcesRequest", ("default", uid, name)),
                       "NodePrepareResourcesResponse")
        got = resp.claims[uid]
        self.assertEqual(got.error, "")
        self.assertEqual(len(got.devices), 1)
        cdi_ids = list(got.devices[0].cdi_device_ids)
        self.assertEqual(cdi_ids, ["vgpu.io/gpu=%s_gpu" % uid])
        return cdi_ids[0]

    def start_tenant(self, device, name):
        """compute_tenant (1 ms kernels back to back) in a container of its own: its host
        pid and the runtime's view of the container."""
        r = self.podman_run(["/usr/local/bin/compute_tenant", "1000000", str(TENANT_MS)],
                            device, detach=True, name=name)
        self.assertEqual(r.returncode, 0, r.stdout)
        r = subprocess.run(self.podman + ["container", "inspect", name], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        ctr = json.loads(r.stdout)[0]
        pid = ctr["State"]["Pid"]
        self.assertGreater(pid, 0, ctr["State"])
        return pid, ctr

    def truth(self, *pids):
        """Each pid's mean share of the GPU over WINDOWS seconds after 1 s, by fakegpu."""
        r = run([os.path.join(BUILD, "bin", "libvgpu_compute_truth"), "0", "1", str(WINDOWS)]
                + [str(p) for p in pids], env=dict(os.environ, **self.fake_env))
        self.assertEqual(r.returncode, 0, r.stdout)
        means = [float(x.split("mean=")[1].split()[0]) for x in r.stdout.splitlines()
                 if "mean=" in x]
        self.assertEqual(len(means), len(pids), r.stdout)
        return means, r.stdout.strip()

    def still_running(self, name):
        """The tenant ran through the windows: still running when they are over (then
        removed), without a CUDA error so far."""
        r = subprocess.run(self.podman + ["container", "inspect", name], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        state = json.loads(r.stdout)[0]["State"]
        logs = run(self.podman + ["logs", name]).stdout
        self.assertTrue(state["Running"], "%s: %s" % (state, logs))
        self.assertEqual(run(self.podman + ["rm", "-f", "-t", "0", name]).returncode, 0)

    def slots(self):
        """The compute slots on the board (one per prepared claim with a share)."""
        return [f for _, _, files in os.walk(self.board) for f in files if f.endswith(".slot")]

    def podman_run(self, args, device=None, detach=False, name=None, extra=()):
        cmd = self.podman + PODMAN_RUN + list(extra)
        cmd += ["-d", "--name", name] if detach else ["--rm"]
        if device:
            cmd += ["--device", device]
        for k, v in self.fake_env.items():
            cmd += ["--env", "%s=%s" % (k, v)]
        state = self.fake_env["FAKEGPU_STATE_DIR"]
        cmd += ["--volume", "%s:%s" % (state, state), "--rootfs", self.rootfs] + args
        if detach:
            self.containers.append(name)
        return run(cmd)

    def probe_info(self, device):
        r = self.podman_run(["/usr/local/bin/libvgpu_probe", "dlsym", "info"], device)
        self.assertEqual(r.returncode, 0, r.stdout)
        line = [x for x in r.stdout.splitlines() if x.startswith("total=")]
        self.assertTrue(line, r.stdout)
        return dict(kv.split("=", 1) for kv in line[0].split())


class EndToEnd(Base):
    """A claim's container gets the GPU, the memory and the compute share of the claim."""

    def test_claim_in_a_container(self):
        port, kubeconfig = self.start_api()
        reg = self.start_plugin(kubeconfig)
        svc = self.register(reg)
        uid = self.put_claim(port)
        device = self.prepare(svc, uid, "train-gpu")
        self.assertEqual(os.listdir(CDI_RUN_DIR), ["vgpu.io-gpu_%s.json" % uid])
        self.assertEqual(len(self.slots()), 1)

        # Without the claim the program sees fakegpu's whole 40 GiB GPU: the limits below
        # come from the CDI spec and nothing else.
        whole = self.probe_info(None)
        self.assertEqual(int(whole["total"]), 40 * GIB, whole)

        # With it: a 10 GiB GPU (the one the claim names) ...
        seen = self.probe_info(device)
        self.assertEqual(int(seen["total"]), 10 * GIB, seen)
        self.assertEqual(int(seen["devtotal"]), 10 * GIB, seen)
        with open(os.path.join(CDI_RUN_DIR, "vgpu.io-gpu_%s.json" % uid)) as f:
            spec = json.load(f)
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        self.assertEqual(seen["uuid"], env["NVIDIA_VISIBLE_DEVICES"])
        # ... whose free memory it can allocate in one piece (the context took the rest),
        # 2 MiB more refused with CUDA_ERROR_OUT_OF_MEMORY, though fakegpu's GPU has 30 GiB
        # left ...
        r = self.podman_run(["/usr/local/bin/libvgpu_probe", "dlsym", "fill"], device)
        self.assertEqual(r.returncode, 0, r.stdout)
        filled = int(r.stdout.split("filled ")[1].split()[0])
        self.assertEqual(filled, int(seen["free"]), r.stdout)
        self.assertGreater(filled, 9 * GIB, r.stdout)

        # ... and 30 % of the GPU's time, alone on it, by fakegpu's timeline.
        name = "vgpu-dra-e2e-%d" % os.getpid()
        pid, ctr = self.start_tenant(device, name)
        cenv = dict(e.split("=", 1) for e in ctr["Config"]["Env"])
        self.assertEqual(cenv.get("CUDA_DEVICE_SM_LIMIT"), "30")
        # The device nodes reach the runtime's spec (podman's inspect lists only --device
        # paths), with the numbers of the host's nodes.
        with open(ctr["OCIConfigPath"]) as f:
            oci = json.load(f)
        nodes = {d["path"]: (d["major"], d["minor"]) for d in oci["linux"]["devices"]}
        for n, numbers in NODES.items():
            self.assertEqual(nodes.get("/dev/" + n), numbers, nodes)
        (mean,), out = self.truth(pid)
        print("30 %% claim: achieved %.1f %% of the GPU (want 30 ± %g): %s" % (mean, TOL, out),
              flush=True)
        self.still_running(name)
        self.assertLessEqual(abs(mean - 30), TOL, out)

        # Unprepare: the spec and the claim's directory are gone, and podman can no longer
        # resolve the device.
        resp = call(svc, V1 + "NodeUnprepareResources",
                       claims_msg("NodeUnprepareResourcesRequest",
                                     ("default", uid, "train-gpu")),
                       "NodeUnprepareResourcesResponse")
        self.assertEqual(resp.claims[uid].error, "")
        self.assertEqual(os.listdir(CDI_RUN_DIR), [])
        self.assertEqual(os.listdir(os.path.join(self.state_dir, "claims")), [])
        self.assertEqual(self.slots(), [])
        r = self.podman_run(["/usr/local/bin/libvgpu_probe", "dlsym", "info"], device)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn(uid, r.stdout)

    def test_two_claims_share_a_gpu(self):
        """Two claims on one GPU (10 GiB + 30 %, 20 GiB + 70 %), each in a container of its
        own saturating the GPU: each sees its own memory and gets its own share, the
        containers' limiters meeting on the compute board the specs mount."""
        port, kubeconfig = self.start_api()
        svc = self.register(self.start_plugin(kubeconfig))
        uid_a = self.put_claim(port, "small", "10Gi", "30")
        uid_b = self.put_claim(port, "big", "20Gi", "70")
        dev_a = self.prepare(svc, uid_a, "small")
        dev_b = self.prepare(svc, uid_b, "big")
        self.assertEqual(int(self.probe_info(dev_b)["total"]), 20 * GIB)
        base = "vgpu-dra-e2e-%d-" % os.getpid()
        pid_a, _ = self.start_tenant(dev_a, base + "small")
        pid_b, _ = self.start_tenant(dev_b, base + "big")
        (mean_a, mean_b), out = self.truth(pid_a, pid_b)
        print("30 %% and 70 %% claims: achieved %.1f %% and %.1f %% (want ± %g): %s"
              % (mean_a, mean_b, TOL, out), flush=True)
        self.still_running(base + "small")
        self.still_running(base + "big")
        self.assertLessEqual(abs(mean_a - 30), TOL, out)
        self.assertLessEqual(abs(mean_b - 70), TOL, out)



class MigOnDemand(Base):
    """MIG on demand through DRA, end to end on fakegpu (docs/dra.md "Partitionable
    devices"): an H100 in MIG mode with no instances, vgpu-dra-plugin --mig-mode=dynamic
    against the 1.36 test API server; claims allocated a 3g.40gb and a 1g.10gb partition
    by the test API server's allocator get their instances made by NodePrepareResources,
    and podman containers given the CDI devices see one MIG device each with its
    instance's memory; NodeUnprepareResources destroys one instance and leaves the other;
    an XID taints the GPU's devices in the slice until the GPU is reset."""

    H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"
    CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"

    def devices(self, port):
        code, body = api_call(port, "GET", "/apis/resource.k8s.io/v1/resourceslices")
        self.assertEqual(code, 200, body)
        return {d["name"]: d for s in body["items"] for d in s["spec"].get("devices", [])}

    def claim_partition(self, port, name, device):
        code, obj = api_call(port, "POST", self.CLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "mig.vgpu.io"}}]}}})
        self.assertEqual(code, 201, obj)
        code, obj = api_call(port, "POST", "/admin/allocate", {
            "namespace": "default", "name": name, "node": NODE, "devices": {"gpu": [device]}})
        self.assertEqual(code, 200, obj)
        return obj["metadata"]["uid"]

    def ctl(self, *args):
        r = run([os.path.join(BUILD, "bin", "fakegpu-ctl")] + list(args),
                env=dict(os.environ, **self.fake_env))
        self.assertEqual(r.returncode, 0, r.stdout)

    def taints(self, port, device):
        return [(t["key"], t.get("value", "")) for t in
                self.devices(port).get(device, {}).get("taints", [])]

    def test_partition_in_a_container(self):
        self.fake_env.update({"FAKEGPU_DEVICES": self.H100, "FAKEGPU_MIG": "0:"})
        port, kubeconfig = self.start_api()
        reg = self.start_plugin(kubeconfig, ["--mig-mode=dynamic"])
        svc = self.register(reg)
        wait_for(lambda: "gpu-0-mig-p9-s4" in self.devices(port), what="partitions published")
        big = self.claim_partition(port, "big", "gpu-0-mig-p9-s4")
        small = self.claim_partition(port, "small", "gpu-0-mig-p19-s0")
        dev_big = self.prepare(svc, big, "big")
        dev_small = self.prepare(svc, small, "small")
        seen_big, seen_small = self.probe_info(dev_big), self.probe_info(dev_small)
        # Each container sees one device: its MIG instance, with the profile's memory.
        self.assertEqual(int(seen_big["total"]), 40448 << 20, seen_big)
        self.assertEqual(int(seen_small["total"]), 9984 << 20, seen_small)
        self.assertEqual(int(self.probe_info(None)["total"]), 81559 << 20)
        with open(os.path.join(CDI_RUN_DIR, "vgpu.io-gpu_%s.json" % small)) as f:
            env = dict(e.split("=", 1) for e in
                       json.load(f)["devices"][0]["containerEdits"]["env"])
        self.assertTrue(env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-"), env)
        # Unprepare the big claim: its instance goes, the small one's stays.
        resp = call(svc, V1 + "NodeUnprepareResources",
                    claims_msg("NodeUnprepareResourcesRequest", ("default", big, "big")),
                    "NodeUnprepareResourcesResponse")
        self.assertEqual(resp.claims[big].error, "")
        self.assertNotEqual(self.podman_run(["/usr/local/bin/libvgpu_probe", "dlsym", "info"],
                                            dev_big).returncode, 0)
        self.assertEqual(int(self.probe_info(dev_small)["total"]), 9984 << 20)
        with open(os.path.join(self.state_dir, "mig.json")) as f:
            self.assertEqual([i["claim"] for i in json.load(f)["instances"]], [small])
        # An XID taints every device of the GPU; a reset (lost, back) clears it.
        self.ctl("xid", "0", "79")
        wait_for(lambda: self.taints(port, "gpu-0-mig-p19-s0") == [(DRIVER + "/xid", "79")],
                 what="XID taint")
        self.ctl("health", "0", "off")
        wait_for(lambda: (DRIVER + "/gpu-lost", "") in self.taints(port, "gpu-0"),
                 what="lost taint")
        self.ctl("health", "0", "on")
        wait_for(lambda: self.taints(port, "gpu-0-mig-p19-s0") == [], what="taints cleared")


class Attacks(Base):
    """A tenant is root in its container (a pod without a securityContext) and controls its
    environment. Nothing it does there lifts its claim's limits: the files the CDI spec
    mounts (the limits at /etc/vgpu/limits and at their own path, /etc/ld.so.preload,
    libvgpu.so, the compute board) are read-only, and the environment cannot raise what
    the limits file says."""

    def setUp(self):
        super().setUp()
        port, kubeconfig = self.start_api()
        svc = self.register(self.start_plugin(kubeconfig))
        self.uid = self.put_claim(port)
        self.device = self.prepare(svc, self.uid, "train-gpu")

    def host_files(self):
        """What the spec mounts, as the host holds it: path -> content (directories: their
        sorted listing, recursively)."""
        with open(os.path.join(CDI_RUN_DIR, "vgpu.io-gpu_%s.json" % self.uid)) as f:
            edits = json.load(f)["devices"][0]["containerEdits"]
        out = {}
        for m in edits["mounts"]:
            h = m["hostPath"]
            if os.path.isdir(h):
                for root, dirs, files in os.walk(h):
                    out[root] = sorted(dirs + files)
                    for name in files:
                        if not name == "region":  # the live counters
                            with open(os.path.join(root, name), "rb") as f:
                                out[os.path.join(root, name)] = f.read()
            else:
                with open(h, "rb") as f:
                    out[h] = f.read()
        return out, edits

    def test_mounted_files_read_only(self):
        before, edits = self.host_files()
        env = dict(e.split("=", 1) for e in edits["env"])
        board, limits = env["VGPU_COMPUTE_BOARD"], env["VGPU_LIMITS_FILE"]
        slot = [m["containerPath"] for m in edits["mounts"] if m["containerPath"].endswith(".slot")]
        self.assertEqual(len(slot), 1, edits["mounts"])
        uuid_dir = os.path.dirname(slot[0])
        targets = ["/etc/vgpu/limits", limits, "/etc/ld.so.preload", self.libvgpu,
                   os.path.join(board, "evil"), os.path.join(uuid_dir, "evil_c.100.slot")]
        # Each target: overwrite, append, create. A write that lands prints WROTE.
        script = "; ".join('(echo "vgpu-limits 1" > %s) 2>/dev/null && echo "WROTE %s"; '
                           '(echo x >> %s) 2>/dev/null && echo "WROTE %s"'
                           % (t, t, t, t) for t in targets)
        r = self.podman_run(["/bin/sh", "-c", script + "; echo done"], self.device)
        self.assertIn("done", r.stdout)
        self.assertNotIn("WROTE", r.stdout)
        after, _ = self.host_files()
        self.assertEqual(after, before)
        # A container after it still gets the claim's GPU.
        self.assertEqual(int(self.probe_info(self.device)["total"]), 10 * GIB)

    def test_environment_cannot_raise_limits(self):
        """The pod's own environment names a bigger limit, another limits file, no compute
        limit, no preload; the container still sees 10 GiB."""
        r = self.podman_run(["/usr/local/bin/libvgpu_probe", "dlsym", "info"], self.device,
                            extra=["--env", "CUDA_DEVICE_MEMORY_LIMIT_0=40960m",
                                   "--env", "CUDA_DEVICE_MEMORY_LIMIT=40960m",
                                   "--env", "VGPU_LIMITS_FILE=/nonexistent",
                                   "--env", "CUDA_DEVICE_SM_LIMIT=100",
                                   "--env", "LD_PRELOAD="])
        self.assertEqual(r.returncode, 0, r.stdout)
        line = [x for x in r.stdout.splitlines() if x.startswith("total=")]
        self.assertTrue(line, r.stdout)
        self.assertEqual(int(dict(kv.split("=", 1) for kv in line[0].split())["total"]),
                         10 * GIB, r.stdout)

def podman_runs():
    """None when podman runs a container here (a root file system of /bin/true), else why
    not."""
    tmp = tempfile.mkdtemp(prefix="vgpu-dra-e2e-check-")
    storage = os.path.join(tmp, "storage")
    podman = ["podman", "--root", os.path.join(storage, "root"), "--runroot",
              os.path.join(storage, "run"), "--tmpdir", os.path.join(storage, "tmp"),
              "--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs",
              "--events-backend", "none"]
    try:
        root = os.path.join(tmp, "rootfs")
        copy_with_libs(root, shutil.which("true"), "/bin/true", dict(os.environ))
        r = run(podman + PODMAN_RUN + ["--rm", "--rootfs", root, "/bin/true"])
        run(podman + ["system", "reset", "-f"])
        if r.returncode != 0:
            return "podman running a container (rc %d: %s)" % (r.returncode,
                                                               r.stdout.strip()[-300:])
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    BUILD, SOURCE, desc = (os.path.abspath(a) for a in sys.argv[1:4])
    why = podman_runs()
    if why:
        vg_skip.skip(why)
    load_messages(desc)
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
