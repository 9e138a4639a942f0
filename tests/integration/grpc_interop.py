"""gRPC interop between vgpu's C gRPC (src/grpc/) and python3-grpcio, both directions.

Run with Debian's /usr/bin/python3 (the one with grpc):
    /usr/bin/python3 grpc_interop.py PEER DESCRIPTOR [unittest names...]
PEER is <build>/tests/grpc_peer (see grpc_peer.c), DESCRIPTOR the FileDescriptorSet protoc-c
wrote for src/grpc/kubelet/api.proto; message classes are built from it at run time, so
no grpc-tools are needed. Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vg_skip  # noqa: E402  (skips, or fails under CI, when grpc is missing)

try:
    import grpc
    from concurrent import futures
    import vg_proto  # google.protobuf: skipped below when missing
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-grpcio (%s; run with /usr/bin/python3)" % exc)

PEER = None
MESSAGES = {}
MIB4 = 4 * 1024 * 1024


def load_messages(path):
    vg_proto.load_messages(path, MESSAGES)


def msg(name, **kw):
    return MESSAGES[name](**kw)


def ser(m):
    return m.SerializeToString()


def parser(name):
    return MESSAGES[name].FromString


def identity(b):
    return b


class Server:
    """The C server (grpc_peer serve) in a child process; its stdout lines are collected."""

    def __init__(self, sock):
        self.sock = sock
        self.proc = subprocess.Popen([PEER, "serve", sock], stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_line("ready")

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.strip())
                self.cond.notify_all()

    def wait_line(self, prefix, timeout=10.0):
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                for i, line in enumerate(self.lines):
                    if line.startswith(prefix):
                        del self.lines[: i + 1]
                        return line
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("no line %r from the C server; got %r" %
                                         (prefix, self.lines))
                self.cond.wait(left)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def channel(sock, authority):
    options = [("grpc.enable_retries", 0)]
    if authority is not None:
        options.append(("grpc.default_authority", authority))
    return grpc.insecure_channel("unix:" + sock, options=options)


class CServerPythonClient(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "plugin.sock")
        self.server = Server(self.sock)
        # Current kubelets send "localhost"; grpc-go dialing a path sends the path itself,
        # which nghttp2's strict HTTP checks would reject.
        self.ch = channel(self.sock, "localhost")
        self.ch_path = channel(self.sock, self.sock)

    def tearDown(self):
        self.ch.close()
        self.ch_path.close()
        self.server.stop()
        self.dir.cleanup()

    def unary(self, ch, method, req, resp_name=None, timeout=5):
        call = ch.unary_unary(method, request_serializer=identity,
                              response_deserializer=parser(resp_name) if resp_name else identity)
        return call(req, timeout=timeout)

    def test_unary_with_both_authorities(self):
        for ch in (self.ch, self.ch_path):
            opts = self.unary(ch, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                              ser(msg("Empty")), "DevicePluginOptions")
            self.assertTrue(opts.get_preferred_allocation_available)
            self.assertFalse(opts.pre_start_required)
        req = msg("AllocateRequest")
        req.container_requests.add().devices_ids.extend(["gpu-0", "gpu-1"])
        resp = self.unary(self.ch_path, "/v1beta1.DevicePlugin/Allocate", ser(req),
                          "AllocateResponse")
        self.assertEqual(len(resp.container_responses), 1)
        self.assertEqual(resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
                         "gpu-0,gpu-1")
        preq = msg("PreferredAllocationRequest")
        c = preq.container_requests.add()
        c.available_deviceIDs.extend(["a", "b", "c"])
        c.allocation_size = 2
        presp = self.unary(self.ch, "/v1beta1.DevicePlugin/GetPreferredAllocation", ser(preq),
                           "PreferredAllocationResponse")
        self.assertEqual(list(presp.container_responses[0].deviceIDs), ["a", "b"])
        empty = self.unary(self.ch, "/v1beta1.DevicePlugin/PreStartContainer",
                           ser(msg("PreStartContainerRequest", devices_ids=["gpu-0"])))
        self.assertEqual(empty, b"")

    def test_handler_error_status_and_message(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.unary(self.ch, "/v1beta1.DevicePlugin/Allocate", ser(msg("AllocateRequest")))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.details(), "want one container request, got 0")
        with self.assertRaises(grpc.RpcError) as cm:
            self.unary(self.ch, "/v1beta1.DevicePlugin/Allocate", b"\xff\xff\xff")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_unknown_method(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.unary(self.ch, "/v1beta1.DevicePlugin/NoSuchMethod", b"")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("/v1beta1.DevicePlugin/NoSuchMethod", cm.exception.details())

    def test_message_ceiling(self):
        big = b"x" * MIB4
        self.assertEqual(len(self.unary(self.ch, "/test.Test/Echo", big, timeout=30)), MIB4)
        self.assertEqual(self.unary(self.ch, "/test.Test/Echo", b""), b"")
        with self.assertRaises(grpc.RpcError) as cm:
            self.unary(self.ch, "/test.Test/Echo", big + b"x", timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        # The connection is still good afterwards.
        self.assertEqual(self.unary(self.ch, "/test.Test/Echo", b"ok"), b"ok")

    def test_list_and_watch_stream(self):
        call = self.ch_path.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                         request_serializer=identity,
                                         response_deserializer=parser("ListAndWatchResponse"))
        it = call(ser(msg("Empty")), timeout=10)
        first = next(it)
        self.assertEqual([d.ID for d in first.devices], ["gpu-0", "gpu-1"])
        healths = set()
        for _ in range(3):
            healths.add(next(it).devices[1].health)
        self.assertEqual(healths, {"Healthy", "Unhealthy"})
        it.cancel()
        line = self.server.wait_line("closed path=/v1beta1.DevicePlugin/ListAndWatch")
        self.assertIn("status=CANCELLED", line)
        self.assertIn("streams=0", line)

    def test_deadline_exceeded(self):
        call = self.ch.unary_stream("/test.Test/Silent", request_serializer=identity,
                                    response_deserializer=identity)
        start = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            list(call(b"", timeout=0.5))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - start, 5)
        line = self.server.wait_line("closed path=/test.Test/Silent")
        # Whichever side's timer fires first: ours sends DEADLINE_EXCEEDED, the client's
        # resets the stream (CANCELLED).
        self.assertRegex(line, "status=(DEADLINE_EXCEEDED|CANCELLED) streams=0")

    def test_client_vanishes_mid_stream(self):
        code = (
            "import grpc,sys,os\n"
            "ch=grpc.insecure_channel('unix:'+sys.argv[1])\n"
            "it=ch.unary_stream('/v1beta1.DevicePlugin/ListAndWatch')(b'')\n"
            "next(it); print('got', flush=True); os._exit(0)\n"
        )
        out = subprocess.run([sys.executable, "-c", code, self.sock], capture_output=True,
                             text=True, timeout=30)
        self.assertIn("got", out.stdout)
        line = self.server.wait_line("closed path=/v1beta1.DevicePlugin/ListAndWatch")
        self.assertIn("status=CANCELLED streams=0", line)
        self.assertEqual(self.unary(self.ch, "/test.Test/Echo", b"still"), b"still")

    def test_graceful_shutdown_ends_streams(self):
        call = self.ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                    request_serializer=identity, response_deserializer=identity)
        it = call(b"", timeout=10)
        next(it)
        self.server.proc.send_signal(signal.SIGTERM)
        with self.assertRaises(grpc.RpcError) as cm:
            for _ in it:
                pass
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(cm.exception.details(), "server shutting down")
        self.server.wait_line("shutdown done")
        self.assertEqual(self.server.proc.wait(timeout=10), 0)
        self.assertFalse(os.path.exists(self.sock))

    def raw(self, data):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(data)
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        finally:
            s.close()
        return got

    def test_malformed_input_closes_connection_only(self):
        # Not HTTP/2 at all: the server drops the connection.
        self.raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        # A valid preface, then a DATA frame on stream 0 (a connection error): GOAWAY
        # (frame type 7) comes back and the connection closes.
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        got = self.raw(preface + b"\x00\x00\x04\x00\x00\x00\x00\x00\x00junk")
        self.assertIn(b"\x07\x00\x00\x00\x00\x00", got)
        # A frame header announcing 16 MiB: refused, not buffered.
        self.raw(preface + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")
        self.assertEqual(self.unary(self.ch, "/test.Test/Echo", b"alive"), b"alive")

    def test_c_client_without_authority(self):
        for authority in ("-", "localhost", self.sock):
            out = subprocess.run([PEER, "call", self.sock, authority, "/test.Test/Echo", "0",
                                  "10"], capture_output=True, text=True, timeout=30)
            self.assertIn("response_len=10", out.stdout)
            self.assertIn("status=OK", out.stdout)


class PythonServerCClient(unittest.TestCase):
    """python3-grpcio serves (as kubelet serves Registration); the C client calls."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "kubelet.sock")
        self.registered = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Register": grpc.unary_unary_rpc_method_handler(
                self.register, request_deserializer=parser("RegisterRequest"),
                response_serializer=ser),
        }
        self.server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler("v1beta1.Registration", handlers),
            grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self.list_and_watch, request_deserializer=parser("Empty"),
                    response_serializer=ser),
            }),
            grpc.method_handlers_generic_handler("test.Test", {
                "Sleep": grpc.unary_unary_rpc_method_handler(
                    self.sleep, request_deserializer=identity, response_serializer=identity),
                "Big": grpc.unary_unary_rpc_method_handler(
                    self.big, request_deserializer=identity, response_serializer=identity),
                "Fail": grpc.unary_unary_rpc_method_handler(
                    self.fail_call, request_deserializer=identity, response_serializer=identity),
            }),
        ))
        self.server.add_insecure_port("unix:" + self.sock)
        self.server.start()

    def tearDown(self):
        self.server.stop(0)
        self.dir.cleanup()

    def register(self, req, context):
        self.registered.append((req, dict(context.invocation_metadata())))
        return msg("Empty")

    def list_and_watch(self, req, context):
        for health in ("Healthy", "Unhealthy", "Healthy"):
            yield msg("ListAndWatchResponse", devices=[msg("Device", ID="gpu-0", health=health)])

    def sleep(self, req, context):
        time.sleep(3)
        return b""

    def big(self, req, context):
        return b"y" * (len(req) * 1024 * 1024 + (1 if len(req) == 5 else 0))

    def fail_call(self, req, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "bad 100% état\nline two")

    def peer(self, *args, timeout=30):
        out = subprocess.run([PEER, *args], capture_output=True, text=True, timeout=timeout)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_register_like_a_plugin(self):
        for authority in ("localhost", self.sock):
            out = self.peer("register", self.sock, authority, "vgpu.sock")
            self.assertIn("status=OK", out)
        self.assertEqual(len(self.registered), 2)
        # The gRPC C core refuses a request without :authority, which is why the C
        # client sends "localhost" unless told otherwise.
        out = self.peer("register", self.sock, "-", "vgpu.sock")
        self.assertRegex(out, "status=(UNKNOWN|INTERNAL) message=.*:authority")
        self.assertEqual(len(self.registered), 2)
        req, md = self.registered[0]
        self.assertEqual(req.version, "v1beta1")
        self.assertEqual(req.endpoint, "vgpu.sock")
        self.assertEqual(req.resource_name, "vgpu.io/gpu")
        self.assertTrue(req.options.get_preferred_allocation_available)
        self.assertEqual(md.get("user-agent", "").split(" ")[0], "vgpu-grpc/0.1")

    def test_stream_from_python(self):
        out = self.peer("watch", self.sock, "localhost")
        self.assertEqual([l for l in out.splitlines() if l.startswith("devices=")],
                         ["devices=gpu-0:Healthy", "devices=gpu-0:Unhealthy",
                          "devices=gpu-0:Healthy"])
        self.assertIn("status=OK", out)

    def test_deadline_and_errors(self):
        start = time.monotonic()
        out = self.peer("call", self.sock, "localhost", "/test.Test/Sleep", "300", "0")
        self.assertIn("status=DEADLINE_EXCEEDED", out)
        self.assertLess(time.monotonic() - start, 2.5)
        out = self.peer("call", self.sock, "localhost", "/test.Test/Nope", "0", "0")
        self.assertIn("status=UNIMPLEMENTED", out)
        out = self.peer("call", self.sock, "localhost", "/test.Test/Fail", "0", "0")
        self.assertIn("status=FAILED_PRECONDITION message=bad 100% état\nline two", out)
        out = self.peer("call", self.sock, "localhost", "/test.Test/Big", "0", "4")
        self.assertIn("response_len=%d" % MIB4, out)
        out = self.peer("call", self.sock, "localhost", "/test.Test/Big", "0", "5")
        self.assertIn("status=RESOURCE_EXHAUSTED", out)
        # Over the ceiling the C client refuses to send at all.
        out = self.peer("call", self.sock, "localhost", "/test.Test/Big", "0", str(MIB4 + 1))
        self.assertIn("start failed", out)


class PythonServerVanishes(unittest.TestCase):
    def test_server_vanishes_mid_stream(self):
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "kubelet.sock")
            code = (
                "import grpc,os,sys,time\n"
                "from concurrent import futures\n"
                "def law(req, ctx):\n"
                "    yield b''\n"
                "    time.sleep(0.5); os._exit(3)\n"
                "s=grpc.server(futures.ThreadPoolExecutor(2))\n"
                "s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("
                "'v1beta1.DevicePlugin',{'ListAndWatch':grpc.unary_stream_rpc_method_handler(law)}),))\n"
                "s.add_insecure_port('unix:'+sys.argv[1]); s.start(); print('ready',flush=True)\n"
                "time.sleep(30)\n"
            )
            srv = subprocess.Popen([sys.executable, "-c", code, sock], stdout=subprocess.PIPE,
                                   text=True)
            try:
                self.assertEqual(srv.stdout.readline().strip(), "ready")
                out = subprocess.run([PEER, "watch", sock, "localhost"], capture_output=True,
                                     text=True, timeout=30)
                self.assertIn("devices=\n", out.stdout)
                self.assertIn("status=UNAVAILABLE", out.stdout)
            finally:
                srv.kill()
                srv.wait()


if __name__ == "__main__":
    PEER = sys.argv[1]
    load_messages(sys.argv[2])
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
