#!/usr/bin/python3
"""vgpu-monitor's metrics endpoint on fakegpu (docs/monitor.md, "Metrics").

    monitor_metrics_test.py BUILD Metrics     the endpoint, its values and every bad input
    monitor_metrics_test.py BUILD Prometheus  Debian's prometheus scrapes it (1 s interval)
    monitor_metrics_test.py BUILD Grafana     deploy/components/monitoring/vgpu-grafana.json names only
                                              series the monitor exports

Three containers on two fakegpu GPUs, each with the device plugin's files (limits file,
region) and a tenant process holding memory through libvgpu; a stand-in API server names
their pods. The values each test expects are read from the regions and limits files by
this script itself (docs/protocol.md's layout), never from the monitor.
"""
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MiB = 1 << 20

PODS = [  # uid, namespace, pod, container, gpu, limit MiB, share %, held MiB
    ("0a1b2c3d-1111-2222-3333-444455556666", "team-a", "train-0", "main", 0, 1024, 30, 300),
    ("99999999-8888-7777-6666-555555555555", "team-b", "infer-1", "work", 0, 2048, 50, 500),
    ("12345678-aaaa-bbbb-cccc-dddddddddddd", "team-b", "batch-2", "job", 1, 4096, 0, 100),
]


# A pod whose container's ID kubelet has not reported yet (the stand-in API server shows
# it waiting, without containerID): still named by its UID.
UNSTARTED = "batch-2"


def slurp(path):
    with open(path) as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_exposition(text):
    """[(name, {labels}, value)] of Prometheus text (enough of the format for our output)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            raise AssertionError("not an exposition line: %r" % line)
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4))))
    return out


def pick(samples, name, **labels):
    return [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]


def region_values(path):
    """used per device UUID, and the refused counter, straight from the file."""
    with open(path, "rb") as f:
        head = f.read(64 + 16 * 192)
    count = struct.unpack_from("<I", head, 12)[0]
    refused = struct.unpack_from("<Q", head, 48)[0]
    used = {}
    for i in range(count):
        d = 64 + 192 * i
        uuid = head[d:d + 64].split(b"\0")[0].decode()
        used[uuid] = struct.unpack_from("<Q", head, d + 80)[0] & ~(1 << 63)
    return used, refused


class Env:
    """fakegpu, the containers directory, tenants, the API server and the monitor."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="vgpu-metrics-")
        self.procs = []
        self.logs = []
        self.env = dict(os.environ)
        for k in ("LD_PRELOAD", "VGPU_LIMITS_FILE", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                  "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_VISIBLE_DEVICES", "VGPU_LOG_LEVEL"):
            self.env.pop(k, None)
        self.env.update(FAKEGPU_STATE_DIR=os.path.join(self.tmp, "state"),
                        FAKEGPU_DEVICES="Test GPU:16GiB:16,Test GPU:16GiB:16",
                        FAKEGPU_CONTEXT_MIB="256",
                        LD_LIBRARY_PATH=os.path.join(BUILD, "fakegpu"))
        asan = self.env.get("ASAN_OPTIONS", "")
        self.env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        status = self.ctl("status").stdout.split("\n")
        self.uuids = [line.split()[1] for line in status if line.strip()]
        self.containers = os.path.join(self.tmp, "containers")
        os.makedirs(self.containers)

    def ctl(self, *args):
        return subprocess.run([os.path.join(BUILD, "bin", "fakegpu-ctl")] + list(args),
                              env=self.env, capture_output=True, text=True, check=True)

    def log(self, name):
        f = open(os.path.join(self.tmp, name), "w")
        self.logs.append(f)
        return f

    def add_container(self, uid, name, gpu, limit_mib, share):
        d = os.path.join(self.containers, "%s_%s" % (uid, name))
        os.makedirs(d)
        text = "# written by the test\nvgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=%dm\n" \
               "VGPU_DEVICE_UUID_0=%s\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n" % (
                   limit_mib, self.uuids[gpu], d)
        if share:
            text += "CUDA_DEVICE_SM_LIMIT=%d\n" % share
        with open(os.path.join(d, "limits"), "w") as f:
            f.write(text)
        return d

    def tenant(self, d, gpu, hold_mib, expect="ready"):
        """A process of the container holding hold_mib through libvgpu; waits until it
        says expect ("ready", or "oom" when the allocation is refused)."""
        env = dict(self.env, LD_PRELOAD=os.path.join(BUILD, "lib", "libvgpu.so"),
                   VGPU_LIMITS_FILE=os.path.join(d, "limits"),
                   CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(d, "region"),
                   CUDA_VISIBLE_DEVICES=str(gpu), VGPU_CONTEXT_MIB="64")
        log = open(os.path.join(self.tmp, "tenant-%d.log" % len(self.procs)), "w+")
        p = subprocess.Popen([os.path.join(BUILD, "bin", "libvgpu_probe_link"), "link", "hold",
                              str(hold_mib * MiB)], env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.logs.append(log)
        for _ in range(1000):
            log.seek(0)
            said = log.read()
            if "ready" in said or "oom" in said:
                if expect not in said:
                    raise AssertionError("tenant said %r, not %r" % (said, expect))
                return p
            if p.poll() is not None:
                log.seek(0)
                raise AssertionError("tenant exited: " + log.read())
            time.sleep(0.01)
        raise AssertionError("tenant never got ready")

    def api(self):
        pods = []
        for i, (uid, ns, pod, ctr, *_rest) in enumerate(PODS):
            status = {"name": ctr, "containerID": "containerd://" + ("%x" % (i + 10)) * 64}
            if pod == UNSTARTED:  # kubelet has not reported its container's ID yet
                status = {"name": ctr, "state": {"waiting": {"reason": "ContainerCreating"}}}
            pods.append({"metadata": {"name": pod, "namespace": ns, "uid": uid},
                         "spec": {"nodeName": "node-1", "containers": [{"name": ctr}]},
                         "status": {"phase": "Running" if pod != UNSTARTED else "Pending",
                                    "containerStatuses": [status]}})
        fixture = os.path.join(self.tmp, "fixture.json")
        with open(fixture, "w") as f:
            json.dump({"pods": pods}, f)
        portfile = os.path.join(self.tmp, "api.port")
        self.procs.append(subprocess.Popen(
            ["/usr/bin/python3", os.path.join(ROOT, "tests", "kube_api_server.py"), "--port", "0",
             "--port-file", portfile, "--fixture", fixture],
            stdout=subprocess.DEVNULL, stderr=self.log("api.log")))
        for _ in range(500):
            if os.path.exists(portfile) and os.path.getsize(portfile):
                break
            time.sleep(0.01)
        port = slurp(portfile).strip()
        kc = os.path.join(self.tmp, "kubeconfig")
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\ncontexts: [{name: t, "
                    "context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: "
                    "\"http://127.0.0.1:%s\"}}]\nusers: [{name: u, user: {token: test}}]\n" % port)
        return kc

    def monitor(self, kubeconfig):
        self.mon_log = os.path.join(self.tmp, "monitor.log")
        self.mon = subprocess.Popen(
            [os.path.join(BUILD, "bin", "vgpu-monitor"), "--region-dir", self.containers,
             "--listen", "127.0.0.1:0", "--interval-ms", "100", "--kubeconfig", kubeconfig,
             "--node-name", "node-1", "--log-level", "debug"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=self.log("monitor.log"))
        self.procs.append(self.mon)
        for _ in range(500):
            m = re.search(r"serving metrics .* port=(\d+)", slurp(self.mon_log))
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the monitor did not start: " + slurp(self.mon_log))

    def start(self):
        self.dirs = []
        for uid, _ns, _pod, ctr, gpu, limit, share, hold in PODS:
            d = self.add_container(uid, ctr, gpu, limit, share)
            self.dirs.append(d)
            self.tenant(d, gpu, hold)
        # One allocation past container B's limit: refused, and counted in its region.
        p = self.tenant(self.dirs[1], 0, 4000, expect="oom")
        p.kill()
        p.wait()
        self.monitor(self.api())
        # Names arrive with the pod watch (every pod in one list): wait for them.
        for _ in range(300):
            if pick(self.samples(), "hami_vgpu_memory_used_bytes", pod="train-0"):
                return
            time.sleep(0.02)
        raise AssertionError("pod names never showed up")

    def get(self, path, timeout=10):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()

    def samples(self):
        return parse_exposition(self.get("/metrics")[2])

    def raw(self, data, timeout=5):
        """Sends bytes, returns the status line (b'' when the monitor just closed)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            got = b""
            try:
                while b"\r\n" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except ConnectionResetError:
                pass
            return got.split(b"\r\n")[0]

    def errors(self, kind):
        return pick(self.samples(), "vgpu_monitor_errors_total", kind=kind)[0]

    def alive(self):
        assert self.mon.poll() is None, "the monitor died: " + slurp(self.mon_log)[-2000:]

    def stop(self):
        """Stops everything; the monitor with SIGTERM, and it must exit 0 (under the
        sanitizer build that is also its leak check)."""
        rc = None
        mon = getattr(self, "mon", None)
        if mon is not None and mon.poll() is None:
            mon.terminate()
            try:
                rc = mon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                rc = "hung"
        elif mon is not None:
            rc = mon.returncode
        log = slurp(self.mon_log)[-3000:] if mon is not None else ""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in self.logs:
            f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if mon is not None and rc != 0:
            raise AssertionError("the monitor exited %s on SIGTERM: %s" % (rc, log))


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.e = Env()
        cls.e.start()

    @classmethod
    def tearDownClass(cls):
        cls.e.stop()

    def tearDown(self):
        self.e.alive()

    def test_values_match_the_regions_and_limits(self):
        s = self.e.samples()
        for i, (uid, ns, pod, ctr, gpu, limit, share, hold) in enumerate(PODS):
            uuid = self.e.uuids[gpu]
            used, refused = region_values(os.path.join(self.e.dirs[i], "region"))
            self.assertGreaterEqual(used[uuid], hold * MiB)  # the tenant's memory and context
            hami = dict(namespace=ns, pod=pod, container=ctr, vdevice_index="0", device_uuid=uuid)
            self.assertEqual(pick(s, "hami_vgpu_memory_used_bytes", **hami), [used[uuid]])
            self.assertEqual(pick(s, "hami_vgpu_memory_limit_bytes", **hami), [limit * MiB])
            lab = dict(Hostname="node-1", namespace=ns, pod=pod, container=ctr, pod_uid=uid,
                       gpu=str(gpu), UUID=uuid)
            self.assertEqual(pick(s, "vgpu_container_memory_used_bytes", **lab), [used[uuid]])
            self.assertEqual(pick(s, "vgpu_container_memory_limit_bytes", **lab), [limit * MiB])
            self.assertEqual(pick(s, "vgpu_container_compute_share_limit_ratio", **lab),
                             [share / 100] if share else [])
            self.assertEqual(len(pick(s, "vgpu_container_compute_share_ratio", **lab)), 1)
            self.assertEqual(len(pick(s, "vgpu_container_throttled_seconds_total", **lab)), 1)
            self.assertEqual(pick(s, "vgpu_container_allocations_refused_total", pod_uid=uid),
                             [refused])
        # Container B's refused allocation is there.
        self.assertGreaterEqual(pick(s, "vgpu_container_allocations_refused_total",
                                     pod="infer-1")[0], 1)
        # Per GPU: what vgpu handed out, who shares it, NVML's memory.
        g0 = dict(Hostname="node-1", gpu="0", UUID=self.e.uuids[0])
        self.assertEqual(pick(s, "vgpu_gpu_memory_allocated_bytes", **g0), [(1024 + 2048) * MiB])
        self.assertEqual(pick(s, "vgpu_gpu_containers", **g0), [2])
        self.assertEqual(pick(s, "vgpu_gpu_memory_total_bytes", **g0), [16 * 1024 * MiB])
        self.assertEqual(pick(s, "vgpu_gpu_healthy", **g0), [1])
        self.assertGreaterEqual(pick(s, "vgpu_gpu_memory_used_bytes", **g0)[0], 800 * MiB)
        self.assertEqual(pick(s, "vgpu_gpu_info", model_name="Test GPU", **g0), [1])
        hami_gpu = dict(node="node-1", device_index="1", device_uuid=self.e.uuids[1],
                        device_type="NVIDIA-Test GPU")
        self.assertEqual(len(pick(s, "hami_host_gpu_memory_used_bytes", **hami_gpu)), 1)

    def test_a_pod_is_named_before_its_container_id(self):
        """The container directory names the pod's UID, and the pod watch shows the pod:
        its series carry its namespace and name from the first sample, before kubelet
        reports a container ID (never namespace="",pod="")."""
        s = self.e.samples()
        uid, ns, pod, ctr, gpu, limit = next(p[:6] for p in PODS if p[2] == UNSTARTED)
        hami = dict(container=ctr, vdevice_index="0", device_uuid=self.e.uuids[gpu])
        self.assertEqual(pick(s, "hami_vgpu_memory_limit_bytes", namespace=ns, pod=pod, **hami),
                         [limit * MiB])
        self.assertEqual(pick(s, "hami_vgpu_memory_limit_bytes", namespace="", pod="", **hami),
                         [])
        self.assertEqual(pick(s, "vgpu_container_memory_limit_bytes", pod_uid=uid, namespace=ns,
                              pod=pod, container=ctr), [limit * MiB])

    def test_promtool_check_metrics_is_clean(self):
        text = self.e.get("/metrics")[2]
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_only_metrics_and_healthz_are_served(self):
        status, headers, body = self.e.get("/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        status, headers, _ = self.e.get("/metrics")
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        before = self.e.errors("http_not_found")
        for path in ("/", "/debug/state", "/metrics/../x", "/metricsx"):
            self.assertEqual(self.e.raw(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode()),
                             b"HTTP/1.1 404 Not Found")
        self.assertEqual(self.e.errors("http_not_found"), before + 4)
        before = self.e.errors("http_method")
        self.assertEqual(self.e.raw(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
                         b"HTTP/1.1 405 Method Not Allowed")
        self.assertEqual(self.e.errors("http_method"), before + 1)

    def test_garbage_on_the_port_is_refused_and_counted(self):
        before = self.e.errors("http_bad_request")
        for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\n\n",
                     b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
                     b"GET /metrics HTTP/1.1\r\nbad header\r\n\r\n"):
            self.assertEqual(self.e.raw(junk), b"HTTP/1.1 400 Bad Request")
        self.assertEqual(self.e.errors("http_bad_request"), before + 5)
        before = self.e.errors("http_too_large")
        self.assertEqual(self.e.raw(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000),
                         b"HTTP/1.1 431 Request Header Fields Too Large")
        self.assertEqual(self.e.errors("http_too_large"), before + 1)
        self.assertEqual(self.e.get("/metrics")[0], 200)

    def _bad_container(self, uid, make_region):
        d = self.e.add_container(uid, "bad", 1, 512, 0)
        make_region(os.path.join(d, "region"))
        return d

    def _check_bad(self, uid, kind, make_region):
        before = self.e.errors(kind)
        d = self._bad_container(uid, make_region)
        t0 = time.monotonic()
        s = self.e.samples()
        self.assertLess(time.monotonic() - t0, 5)
        # Counted; the container shows its limit but no region values; the others are intact.
        self.assertGreater(pick(s, "vgpu_monitor_errors_total", kind=kind)[0], before)
        self.assertEqual(pick(s, "vgpu_container_memory_limit_bytes", pod_uid=uid), [512 * MiB])
        self.assertEqual(pick(s, "vgpu_container_memory_used_bytes", pod_uid=uid), [])
        self.assertEqual(len(pick(s, "vgpu_container_memory_used_bytes", pod="train-0")), 1)
        with open(self.e.mon_log) as f:
            self.assertIn("kind=" + kind, f.read())
        shutil.rmtree(d)
        # Gone: its series go with it.
        self.assertEqual(pick(self.e.samples(), "vgpu_container_memory_limit_bytes", pod_uid=uid), [])

    def _copy(self, mutate):
        def make(path):
            with open(os.path.join(self.e.dirs[0], "region"), "rb") as f:
                data = bytearray(f.read())
            data = mutate(data)
            with open(path, "wb") as f:
                f.write(data)
        return make

    def test_corrupt_region(self):
        def bad_magic(b):
            b[0:8] = b"garbage!"
            return b
        self._check_bad("c0000000-0000-0000-0000-000000000001", "region_corrupt", self._copy(bad_magic))

        def bad_count(b):
            b[12:16] = struct.pack("<I", 99)
            return b
        self._check_bad("c0000000-0000-0000-0000-000000000002", "region_corrupt", self._copy(bad_count))

        def no_nul(b):
            b[64:128] = b"G" * 64
            return b
        self._check_bad("c0000000-0000-0000-0000-000000000003", "region_corrupt", self._copy(no_nul))

    def test_truncated_region(self):
        self._check_bad("c0000000-0000-0000-0000-000000000004", "region_truncated",
                        self._copy(lambda b: b[:1000]))
        self._check_bad("c0000000-0000-0000-0000-000000000005", "region_truncated",
                        self._copy(lambda b: b""))
        self._check_bad("c0000000-0000-0000-0000-000000000006", "region_truncated",
                        self._copy(lambda b: b + b"x"))

    def test_missing_and_hostile_region_files(self):
        self._check_bad("c0000000-0000-0000-0000-000000000007", "region_missing", lambda p: None)
        # A FIFO would block a reader that waited on it; a symlink could point anywhere.
        self._check_bad("c0000000-0000-0000-0000-000000000008", "region_unreadable", os.mkfifo)
        self._check_bad("c0000000-0000-0000-0000-000000000009", "region_unreadable",
                        lambda p: os.symlink(os.path.join(self.e.dirs[0], "region"), p))
        self._check_bad("c0000000-0000-0000-0000-00000000000a", "region_unreadable", os.mkdir)

    def test_a_tenant_cannot_block_or_crash_the_reader(self):
        """The container's processes can write their region: lock all of it, freeze its
        counter (bit 63, a recount that never ends), write impossible compute values. The
        scrape neither waits nor shows impossible numbers."""
        import fcntl
        uid = "e0000000-0000-0000-0000-000000000001"
        d = self.e.add_container(uid, "evil", 1, 1024, 20)
        self.e.tenant(d, 1, 10)
        path = os.path.join(d, "region")
        with open(path, "r+b") as f:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # the region lock, held for good
            head = bytearray(f.read(64 + 192))
            used = struct.unpack_from("<Q", head, 64 + 80)[0]
            struct.pack_into("<Q", head, 64 + 80, used | (1 << 63))
            struct.pack_into("<q", head, 64 + 88 + 8 * 3, -5)           # waited_ns
            struct.pack_into("<q", head, 64 + 88 + 8 * 9, 5 * 10 ** 6)   # achieved_ppm
            f.seek(0)
            f.write(head)
            f.flush()
            t0 = time.monotonic()
            s = self.e.samples()
            self.assertLess(time.monotonic() - t0, 2)
            self.assertEqual(pick(s, "vgpu_container_memory_used_bytes", pod_uid=uid), [used])
            self.assertEqual(pick(s, "vgpu_container_throttled_seconds_total", pod_uid=uid), [0])
            self.assertEqual(pick(s, "vgpu_container_compute_share_ratio", pod_uid=uid), [1])
            self.assertEqual(pick(s, "hami_container_device_utilization_ratio", pod="", container="evil"),
                             [100])
        shutil.rmtree(d)

    def test_bad_limits_file(self):
        uid = "c0000000-0000-0000-0000-00000000000b"
        before = self.e.errors("limits")
        d = self.e.add_container(uid, "bad", 1, 512, 0)
        with open(os.path.join(d, "limits"), "w") as f:
            f.write("vgpu-limits 9\ngarbage\n")
        s = self.e.samples()
        self.assertGreater(pick(s, "vgpu_monitor_errors_total", kind="limits")[0], before)
        self.assertEqual(pick(s, "vgpu_container_memory_limit_bytes", pod_uid=uid), [])
        shutil.rmtree(d)

    def test_departed_container_is_forgotten(self):
        uid = "d0000000-0000-0000-0000-000000000001"
        d = self.e.add_container(uid, "gone", 1, 1024, 0)
        p = self.e.tenant(d, 1, 10)
        self.assertEqual(len(pick(self.e.samples(), "vgpu_container_memory_used_bytes", pod_uid=uid)), 1)
        p.kill()
        p.wait()
        shutil.rmtree(d)
        s = self.e.samples()
        self.assertEqual([x for x in s if x[1].get("pod_uid") == uid], [])

    def test_xid_and_a_gpu_off_the_bus(self):
        self.e.ctl("xid", "1", "79")
        for _ in range(100):
            s = self.e.samples()
            if pick(s, "vgpu_gpu_last_xid", gpu="1") == [79]:
                break
            time.sleep(0.05)
        self.assertEqual(pick(s, "vgpu_gpu_last_xid", gpu="1"), [79])
        self.assertEqual(pick(s, "vgpu_gpu_xid_errors_total", gpu="1"), [1])
        self.assertEqual(pick(s, "vgpu_gpu_last_xid", gpu="0"), [0])
        before = self.e.errors("nvml")
        self.e.ctl("health", "1", "off")
        try:
            s = self.e.samples()
            self.assertEqual(pick(s, "vgpu_gpu_healthy", gpu="1"), [0])
            self.assertEqual(pick(s, "vgpu_gpu_healthy", gpu="0"), [1])
            self.assertEqual(pick(s, "vgpu_gpu_memory_used_bytes", gpu="1"), [])
            self.assertGreater(pick(s, "vgpu_monitor_errors_total", kind="nvml")[0], before)
            # The containers on it are still shown from their regions.
            self.assertEqual(len(pick(s, "vgpu_container_memory_used_bytes", pod="batch-2")), 1)
        finally:
            self.e.ctl("health", "1", "on")
        self.assertEqual(pick(self.e.samples(), "vgpu_gpu_healthy", gpu="1"), [1])


class Prometheus(unittest.TestCase):
    """Debian's prometheus scrapes the monitor every second; its query API must show the
    series with the values the regions hold."""

    def setUp(self):
        self.e = Env()
        self.e.start()
        self.prom = None
        self.cluster = None

    def tearDown(self):
        if self.prom and self.prom.poll() is None:
            self.prom.kill()
            self.prom.wait()
        if self.cluster:
            self.cluster.stop()
        self.e.stop()

    def query(self, q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.pport, urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        self.assertEqual(body["status"], "success")
        return body["data"]["result"]

    def test_prometheus_scrapes_the_monitor(self):
        self.pport = free_port()
        # The scheduler's /metrics too, when it is built: a cluster of one node with two
        # GPUs behind the stand-in API server.
        sched = os.path.join(BUILD, "bin", "vgpu-scheduler")
        targets = "- job_name: vgpu-monitor\n  static_configs:\n  - targets: ['127.0.0.1:%d']\n" % self.e.port
        if os.path.exists(sched):
            sys.path.insert(0, os.path.dirname(__file__))
            import scheduler_harness as H
            self.cluster = H.Cluster(sched, [H.node_object("node-1", 2)])
            self.cluster.wait_ready()
            targets += "- job_name: vgpu-scheduler\n  static_configs:\n  - targets: ['127.0.0.1:%d']\n" \
                % self.cluster.port
        cfg = os.path.join(self.e.tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
                    "rule_files: [%s]\n"
                    "scrape_configs:\n%s" % (
                        os.path.join(ROOT, "deploy", "components", "monitoring", "vgpu-alerts.yaml"), targets))
        self.prom = subprocess.Popen(
            ["prometheus", "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(self.e.tmp, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.pport, "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=self.e.log("prometheus.log"))
        deadline = time.monotonic() + 30
        scrapes = 0
        while time.monotonic() < deadline:
            try:
                r = self.query('count_over_time(up{job="vgpu-monitor"}[1m])')
                scrapes = int(float(r[0]["value"][1])) if r else 0
            except OSError:
                pass
            if scrapes >= 2:
                break
            time.sleep(0.2)
        self.assertGreaterEqual(scrapes, 2, slurp(os.path.join(self.e.tmp, "prometheus.log")))
        self.assertEqual(self.query('up{job="vgpu-monitor"}')[0]["value"][1], "1")
        if self.cluster:
            for _ in range(50):
                r = self.query('count_over_time(up{job="vgpu-scheduler"}[1m])')
                if r and float(r[0]["value"][1]) >= 2:
                    break
                time.sleep(0.2)
            self.assertEqual(self.query('up{job="vgpu-scheduler"}')[0]["value"][1], "1")
            r = self.query('count({job="vgpu-scheduler", __name__=~"vgpu_.*|hami_.*"})')
            self.assertGreater(float(r[0]["value"][1]), 0)
        for i, (uid, ns, pod, ctr, gpu, limit, share, hold) in enumerate(PODS):
            uuid = self.e.uuids[gpu]
            used, refused = region_values(os.path.join(self.e.dirs[i], "region"))
            r = self.query('vgpu_container_memory_used_bytes{pod_uid="%s",UUID="%s"}' % (uid, uuid))
            self.assertEqual(len(r), 1)
            self.assertEqual(float(r[0]["value"][1]), used[uuid])
            self.assertEqual(r[0]["metric"]["namespace"], ns)
            self.assertEqual(r[0]["metric"]["pod"], pod)
            r = self.query('hami_vgpu_memory_limit_bytes{namespace="%s",pod="%s",container="%s"}'
                           % (ns, pod, ctr))
            self.assertEqual([float(x["value"][1]) for x in r], [limit * MiB])
            r = self.query('vgpu_container_allocations_refused_total{pod_uid="%s"}' % uid)
            self.assertEqual([float(x["value"][1]) for x in r], [refused])
        r = self.query('vgpu_gpu_memory_allocated_bytes{gpu="0"}')
        self.assertEqual(float(r[0]["value"][1]), (1024 + 2048) * MiB)
        # The alert rules load and evaluate against the real series.
        with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/rules" % self.pport, timeout=5) as r:
            groups = json.load(r)["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        self.assertGreaterEqual(len(rules), 4)
        self.assertTrue(all(rule.get("health") in ("ok", "unknown") for rule in rules), rules)


class Grafana(unittest.TestCase):
    """Every query of the dashboard names only series a running monitor exports."""

    def test_dashboard_queries_name_exported_series(self):
        path = os.path.join(ROOT, "deploy", "components", "monitoring", "vgpu-grafana.json")
        with open(path) as f:
            dash = json.load(f)  # valid JSON, or this fails
        exprs = []

        def walk(o):
            if isinstance(o, dict):
                if isinstance(o.get("expr"), str):
                    exprs.append(o["expr"])
                for v in o.values():
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)
        walk(dash["panels"])
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                q = var["query"]
                exprs.append(q["query"] if isinstance(q, dict) else q)
        # Every series a panel shows can be joined per GPU and per container.
        self.assertTrue(all(p["type"] == "row" or p["targets"] for p in dash["panels"]))
        self.assertGreaterEqual(len(exprs), 8)
        e = Env()
        try:
            e.start()
            exported = {n for n, _l, _v in e.samples()}
        finally:
            e.stop()
        promql = {"sum", "by", "max", "min", "avg", "rate", "increase", "count", "without", "on",
                  "ignoring", "group_left", "group_right", "and", "or", "unless", "label_values",
                  "topk", "bottomk", "clamp_max", "clamp_min", "irate", "delta", "abs", "bool",
                  "changes", "resets", "time", "vector", "scalar", "offset", "sort", "sort_desc",
                  "max_over_time", "min_over_time", "avg_over_time", "count_over_time", "s", "m", "h",
                  "d", "Hostname", "UUID", "gpu", "namespace", "pod", "container", "pod_uid",
                  "node", "device_uuid", "device_index", "device_type", "vdevice_index", "kind",
                  "model_name", "policy", "le", "instance", "job"}
        def series(expr):
            body = re.sub(r'"[^"]*"', '""', expr)          # label values
            body = re.sub(r"\$\{?\w+\}?", "", body)        # dashboard variables
            body = re.sub(r"\[[^\]]*\]", "", body)        # ranges
            return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", body)) - promql
        # The check itself catches a query naming a series nobody exports.
        self.assertEqual(series('sum by (pod) (rate(vgpu_container_gpu_seconds_total{pod=~"$pod"}[5m]))')
                         - exported, {"vgpu_container_gpu_seconds_total"})
        for expr in exprs:
            names = series(expr)
            self.assertTrue(names, "no series in %r" % expr)
            self.assertEqual(names - exported, set(), "query %r names series the monitor does not "
                             "export" % expr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
