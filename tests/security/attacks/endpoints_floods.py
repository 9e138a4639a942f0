#!/usr/bin/env python3
"""Connection floods against every listening endpoint (docs/security.md, "Endpoints under
connection floods"; issue 22 items 6 and 12).

    endpoints_floods.py BUILD_DIR SOURCE_DIR [unittest names...]

The attacker connects from 127.0.0.2, the well-behaved client from 127.0.0.1 (two hosts to
the daemon, which shares its connections out per address). Each case plays the attack
against the real daemon and measures what a user would notice:

  WebhookHalfOpen          400 TCP connections to the webhook's TLS port that never finish
                           their handshake: every one is closed within the handshake
                           timeout (10 s) and a margin, while the webhook and the
                           extender answer a client throughout;
  WebhookHalfOpenLowLimit  the same with vgpu-scheduler's file limit at 256 (ulimit -n),
                           400 half-open connections: more than the process may open;
  MetricsSlowloris         64 connections to the monitor's metrics port, each sending its
                           request head a byte a second and reopened as soon as the monitor
                           closes it, for 25 s: at least 24 of 25 scrapes (one a second,
                           2 s timeout each) are answered;
  MetricsStatus            a 64 KiB request head is answered 431 (not reset); POST, PUT and
                           DELETE, with or without a body, 405 with Allow: GET, HEAD;
  GrpcDevicePlugin         100 idle connections held (and reopened) on the device plugin's
                           socket by another process: kubelet dialling the plugin again
                           (GetDevicePluginOptions, Allocate) is answered;
  GrpcDra                  the same on the DRA plugin's registration and service sockets
                           (GetInfo, NodePrepareResources).
"""
import http.client
import os
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "tests", "dra"))
import scheduler_harness as H  # noqa: E402

BUILD = None
ATTACKER = "127.0.0.2"  # the flood's address
CLIENT = "127.0.0.1"  # the well-behaved client's
HEAD_TIMEOUT_S = 10  # CONNGUARD_HEAD_MS_DEFAULT
FLOOD_HELPER = os.path.join(HERE, "endpoints_flood_unix.py")


def tcp_from(src, port, timeout=5):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect((CLIENT, port))
    return s


def closed_by_peer(s):
    """Whether the other end has closed s (end of stream or reset); never blocks."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            return False
        return s.recv(4096, socket.MSG_DONTWAIT) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except BlockingIOError:
        return False


def make_cert(d):
    cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=vgpu-scheduler", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


def free_port():
    with socket.socket() as s:
        s.bind((CLIENT, 0))
        return s.getsockname()[1]


class WebhookHalfOpen(unittest.TestCase):
    NOFILE = None  # the daemon's file limit; None: as inherited
    FLOOD = 400

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-floods-")
        self.cert, self.key = make_cert(self.dir)
        self.wport = free_port()
        binary = os.path.join(BUILD, "bin", "vgpu-scheduler")
        if self.NOFILE is not None:
            wrapper = os.path.join(self.dir, "vgpu-scheduler")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\nulimit -n %d || exit 99\nexec %s \"$@\"\n"
                        % (self.NOFILE, binary))
            os.chmod(wrapper, 0o755)
            binary = wrapper
        self.c = H.Cluster(binary, [H.node_object("node-00", 1)], extra_args=[
            "--webhook-listen", "%s:%d" % (CLIENT, self.wport), "--tls-cert", self.cert,
            "--tls-key", self.key])
        self.c.wait_ready()
        self.flood = []

    def tearDown(self):
        for s in self.flood:
            s.close()
        self.c.stop()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(self.c.log()[-6000:])

    def webhook_ok(self):
        """A TLS client's health probe on the webhook's port, answered within 5 s."""
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.check_hostname = False
        conn = http.client.HTTPSConnection(CLIENT, self.wport, context=ctx, timeout=5)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def extender_ok(self):
        conn = http.client.HTTPConnection(CLIENT, self.c.port, timeout=5)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def test_half_open_closed_and_served(self):
        t0 = time.monotonic()
        unanswered = 0
        for _ in range(self.FLOOD):
            try:
                s = tcp_from(ATTACKER, self.wport, timeout=1)
            except OSError:
                unanswered += 1  # refused, or the backlog full: held by nobody
                continue
            s.send(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
            self.flood.append(s)
        flooded = time.monotonic()  # the last connection is as old as the timeout from here
        probes = []
        while time.monotonic() - flooded < HEAD_TIMEOUT_S + 4:
            probes.append((self.webhook_ok(), self.extender_ok()))
            if all(closed_by_peer(s) for s in self.flood):
                break
            time.sleep(0.5)
        open_left = sum(not closed_by_peer(s) for s in self.flood)
        seconds = time.monotonic() - flooded
        print("half-open: flood opened in %.1f s, %d connected (%d not), %d still open %.1f s "
              "later; probes: webhook "
              "%d/%d, extender %d/%d answered" % (flooded - t0, len(self.flood), unanswered,
                                                  open_left, seconds,
                                           sum(w for w, _ in probes), len(probes),
                                           sum(e for _, e in probes), len(probes)),
              file=sys.stderr)
        self.assertEqual(open_left, 0, "half-open connections still held after %.1f s" % seconds)
        self.assertTrue(all(w for w, _ in probes), "the webhook missed a probe: %r" % probes)
        self.assertTrue(all(e for _, e in probes), "the extender missed a probe: %r" % probes)
        self.assertIsNone(self.c.sched.poll(), "vgpu-scheduler exited")
        # The operator sees it: what the webhook's guard closed, by reason.
        status, text = self.c.ext.request("GET", "/metrics", raw=True)
        closed = 0
        for line in text.decode().splitlines():
            if line.startswith('vgpu_scheduler_connections_closed_total{server="webhook"'):
                closed += int(line.split()[-1])
        self.assertEqual(status, 200)
        self.assertGreaterEqual(closed, len(self.flood))


class WebhookHalfOpenLowLimit(WebhookHalfOpen):
    NOFILE = 256  # fewer descriptors than the flood has connections

    def test_half_open_closed_and_served(self):
        super().test_half_open_closed_and_served()


class Monitor(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-floods-mon-")
        os.makedirs(os.path.join(self.dir, "containers"))
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "fakegpu"),
                   FAKEGPU_STATE_DIR=self.dir)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = os.path.join(self.dir, "monitor.log")
        with open(self.log, "w") as log:
            self.mon = subprocess.Popen(
                [os.path.join(BUILD, "bin", "vgpu-monitor"), "--region-dir",
                 os.path.join(self.dir, "containers"), "--listen", CLIENT + ":0",
                 "--node-name", "node-1"], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        self.port = None
        while self.port is None and time.monotonic() < deadline:
            with open(self.log) as f:
                for line in f:
                    if "serving metrics" in line and "port=" in line:
                        self.port = int(line.split("port=")[1].split()[0])
            time.sleep(0.05)
        self.assertIsNotNone(self.port, "the monitor did not start")

    def tearDown(self):
        self.mon.terminate()
        try:
            self.mon.wait(10)
        except subprocess.TimeoutExpired:
            self.mon.kill()
            self.mon.wait()

    def raw(self, data, timeout=5):
        """Sends data from the client's address; returns what came back before the end of the
        stream, or raises ConnectionResetError when the connection was reset."""
        s = tcp_from(CLIENT, self.port, timeout)
        try:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the answer may already be waiting
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out
                out += chunk
        finally:
            s.close()


class MetricsSlowloris(Monitor):
    SLOW = 64
    PROBES = 25

    def test_scrapes_served(self):
        stop = threading.Event()
        held = []
        reopened = [0]

        def attack():
            def open_one():
                try:
                    s = tcp_from(ATTACKER, self.port, 2)
                    s.send(b"GET /metrics HTTP/1.1\r\n")
                    return s
                except OSError:
                    return None
            socks = [open_one() for _ in range(self.SLOW)]
            last_drip = time.monotonic()
            while not stop.is_set():
                # Those the monitor has not closed since the last look: held by the attack.
                held.append(sum(s is not None and not closed_by_peer(s) for s in socks))
                for i, s in enumerate(socks):
                    if s is None or closed_by_peer(s):
                        if s is not None:
                            s.close()
                        socks[i] = open_one()
                        reopened[0] += 1
                if time.monotonic() - last_drip >= 1:
                    last_drip = time.monotonic()
                    for s in socks:
                        try:
                            if s is not None:
                                s.send(b"X")  # one byte of a header line a second
                        except OSError:
                            pass
                time.sleep(0.2)
            for s in socks:
                if s is not None:
                    s.close()

        t = threading.Thread(target=attack, daemon=True)
        t.start()
        time.sleep(2)  # the slow connections are in
        ok = 0
        for _ in range(self.PROBES):
            t0 = time.monotonic()
            conn = http.client.HTTPConnection(CLIENT, self.port, timeout=2,
                                              source_address=(CLIENT, 0))
            try:
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                ok += r.status == 200 and b"vgpu_monitor" in r.read()
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
            time.sleep(max(0.0, 1 - (time.monotonic() - t0)))
        stop.set()
        t.join(10)
        print("slowloris: %d slow connections (median held %d, %d reopened): %d of %d scrapes "
              "answered" % (self.SLOW, sorted(held)[len(held) // 2] if held else 0, reopened[0],
                            ok, self.PROBES), file=sys.stderr)
        self.assertGreaterEqual(ok, self.PROBES - 1)
        self.assertIsNone(self.mon.poll(), "vgpu-monitor exited")


class MetricsStatus(Monitor):
    def test_431_for_a_large_head(self):
        head = b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * (64 * 1024) + b"\r\n\r\n"
        out = self.raw(head)
        self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:80])

    def test_405_for_other_methods(self):
        for req in (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
                    b"POST /metrics HTTP/1.1\r\nContent-Length: 70000\r\n\r\n" + b"x" * 70000,
                    b"PUT /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
                    b"0\r\n\r\n",
                    b"DELETE /metrics HTTP/1.1\r\n\r\n",
                    b"POST /metrics HTTP/1.1\r\n\r\n"):
            out = self.raw(req)
            self.assertTrue(out.startswith(b"HTTP/1.1 405 "), (req[:40], out[:80]))
            self.assertIn(b"\r\nAllow: GET, HEAD\r\n", out)


def unix_flood(path, count):
    """Another process holding count idle connections to path, reopening those closed."""
    p = subprocess.Popen([sys.executable, FLOOD_HELPER, path, str(count)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("ready"):
        p.kill()
        raise AssertionError("the flood did not start: %r" % line)
    return p


def end_flood(p):
    p.stdin.close()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


FLOOD_UNIX = 100

# The kubelet stand-ins of the device plugin's and the DRA plugin's own tests; they skip
# (or fail under CI) when python3-grpcio is missing.
import deviceplugin_kubelet as _dp  # noqa: E402
import dra_kubelet as _dra  # noqa: E402


class GrpcDevicePlugin(_dp.Base):
    def test_kubelet_served_under_flood(self):
        self.kubelet = _dp.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = _dp.Plugin(self.tmp, _dp.TIME_SLICING)
        req = self.registered()
        sock = os.path.join(self.tmp, "kubelet", req.endpoint)
        flood = unix_flood(sock, FLOOD_UNIX)
        try:
            time.sleep(0.5)
            # kubelet dials the plugin again, as after its own restart.
            self.kubelet.channels[req.resource_name].close()
            ch = _dp.grpc.insecure_channel("unix://" + sock,
                                       options=[("grpc.default_authority", "localhost"),
                                                ("grpc.use_local_subchannel_pool", 1)])
            self.kubelet.channels[req.resource_name] = ch
            t0 = time.monotonic()
            self.kubelet.call(req.resource_name, "GetDevicePluginOptions", _dp.M["Empty"](),
                              "DevicePluginOptions")
            ids = [d for d, _ in _dp.wait_for(lambda: self.kubelet.latest(req.resource_name),
                                              what="devices")][:1]
            resp = self.kubelet.allocate(req.resource_name, ids)
            print("device plugin: %d idle connections held; kubelet answered in %.2f s"
                  % (FLOOD_UNIX, time.monotonic() - t0), file=sys.stderr)
            self.assertEqual(len(resp.container_responses), 1)
        finally:
            end_flood(flood)
        self.assertIsNone(self.plugin.proc.poll(), "the plugin exited")


class GrpcDra(_dra.Base):
    def test_kubelet_served_under_flood(self):
        self.start()
        _dra.wait_for(lambda: os.path.exists(self.plugin.svc_sock), what="service socket")
        floods = [unix_flood(self.plugin.reg_sock, FLOOD_UNIX),
                  unix_flood(self.plugin.svc_sock, FLOOD_UNIX)]
        try:
            time.sleep(0.5)
            t0 = time.monotonic()
            info = _dra.call(self.channel(self.plugin.reg_sock),
                             "/pluginregistration.Registration/GetInfo",
                             _dra.M["InfoRequest"](), "PluginInfo", timeout=5)
            self.assertEqual(info.name, _dra.DRIVER)
            resp = _dra.call(self.service(), _dra.V1 + "NodePrepareResources",
                             _dra.claims_msg("NodePrepareResourcesRequest"),
                             "NodePrepareResourcesResponse", timeout=5)
            print("dra plugin: %d idle connections held on each socket; kubelet answered in "
                  "%.2f s" % (FLOOD_UNIX, time.monotonic() - t0), file=sys.stderr)
            self.assertEqual(len(resp.claims), 0)
        finally:
            for f in floods:
                end_flood(f)


if __name__ == "__main__":
    BUILD = os.path.abspath(sys.argv[1])
    source = os.path.abspath(sys.argv[2])
    desc = os.path.join(BUILD, "gen", "grpc", "kubelet", "api.desc")
    _dp.BUILD, _dp.SOURCE = BUILD, source
    _dp.load_messages(desc)
    _dra.BUILD, _dra.SOURCE = BUILD, source
    _dra.load_messages(sys.argv[3])
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
