#!/usr/bin/env python3
"""vgpu-scheduler's control-plane endpoints, attacked by a network peer and a pod author
(docs/security.md, "Closed control-plane endpoints").

Each test plays the attacker against a real vgpu-scheduler and the test API server
(tests/kube_api_server.py), over real sockets and real TLS (openssl-made certificates),
and asserts that the attack changes nothing:

  Listen        the extender listens on loopback by default (a connection to the
                machine's own non-loopback address is refused), and refuses to start on
                any other address without TLS and client authentication;
  ClientCert    with --client-ca: no certificate or one from another CA is refused, the
                right one is served;
  BearerToken   with --token-file: no token, a wrong one, another scheme: 401; the right
                one is served;
  Paths         /debug/state is 404 unless --debug-state; /webhook is not served on the
                extender's address, nor the extender's verbs on the webhook's;
  Assumptions   ten /filter calls for pods that do not exist reserve nothing and a real pod
                still fits; a pod the watch shows a moment late still fits; the
                per-namespace bound on outstanding assumptions holds.

usage: endpoints_test.py VGPU_SCHEDULER_BINARY [unittest args]
"""
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import scheduler_harness as H  # noqa: E402
import vg_skip  # noqa: E402

BINARY = None
ONE_GPU = {"nvidia.com/gpu": "1"}  # a whole card: exclusive


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_ca(d, name, cn=None):
    """A self-signed certificate (a CA's, or a client's that no CA signed)."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=" + (cn or name), "-keyout", key, "-out", crt)
    return crt, key


def make_signed(d, name, ca):
    key, csr, crt = (os.path.join(d, name + ext) for ext in (".key", ".csr", ".crt"))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", "/CN=" + name, "-keyout", key, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
            "-days", "1", "-out", crt)
    return crt, key


def non_loopback_address():
    """An IPv4 address of this machine that is not loopback, or None."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            addr = line.split()[3].split("/")[0]
            if not addr.startswith("127."):
                return addr
    except (OSError, IndexError):
        pass
    try:
        for addr in socket.gethostbyname_ex(socket.gethostname())[2]:
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    return None


missing = vg_skip.skip_test


class Base(unittest.TestCase):
    NODES = 3
    GPUS = 2

    def cluster(self, extra_args=(), plain=True):
        nodes = [H.node_object("node-%02d" % i, self.GPUS) for i in range(self.NODES)]
        self.names = ["node-%02d" % i for i in range(self.NODES)]
        self.c = H.Cluster(BINARY, nodes, extra_args=list(extra_args))
        if plain:
            self.c.wait_ready()
        return self.c

    def tearDown(self):
        if getattr(self, "c", None) is not None:
            self.c.stop()
            if os.environ.get("VGPU_TEST_LOG"):
                sys.stderr.write(self.c.log()[-6000:])

    def real_pod(self, name, limits=ONE_GPU, ns="default"):
        return self.c.create_pod(H.pod_object(name, limits, ns=ns))

    def tenants(self):
        return sum(g["tenants"] for gpus in self.c.state()["nodes"].values() for g in gpus)


class Listen(Base):
    def run_refused(self, args, *needles):
        """vgpu-scheduler with args must exit non-zero, naming each needle."""
        d = tempfile.mkdtemp(prefix="vgpu-ep-")
        kubeconfig = os.path.join(d, "kubeconfig")
        with open(kubeconfig, "w") as f:  # never reached: the refusal comes first
            f.write("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
                    "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
                    "users: [{name: u, user: {token: t}}]\n")
        try:
            p = subprocess.run([BINARY, "--kubeconfig", kubeconfig] + list(args),
                               capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("vgpu-scheduler %s kept running: not refused" % " ".join(args))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        for n in needles:
            self.assertIn(n, p.stderr)
        return p.stderr

    def test_default_listens_on_loopback_only(self):
        addr = non_loopback_address()
        if addr is None:
            missing("a non-loopback IPv4 address on this machine")
        # No --listen: the default address (port 8888).
        self.c = H.Cluster(BINARY, [H.node_object("node-00", 1)], base_args=())
        self.assertEqual(self.c.port, 8888)
        self.c.wait_ready()  # served on 127.0.0.1
        s = socket.socket()
        s.settimeout(5)
        with self.assertRaises(OSError, msg="the extender answered on %s:8888" % addr):
            s.connect((addr, 8888))
        s.close()

    def test_ipv6_loopback_is_loopback(self):
        if not socket.has_ipv6:
            missing("IPv6 sockets")
        try:
            probe = socket.socket(socket.AF_INET6)
            probe.bind(("::1", 0))
            probe.close()
        except OSError as exc:
            missing("an IPv6 loopback address (%s)" % exc)
        self.c = H.Cluster(BINARY, [H.node_object("node-00", 1)],
                           base_args=("--listen", "[::1]:0"))
        deadline = time.time() + 60
        while time.time() < deadline:
            conn = http.client.HTTPConnection("::1", self.c.port, timeout=5)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.05)
        self.fail("no answer on [::1]:%d:\n%s" % (self.c.port, self.c.log()))

    def test_refuses_other_addresses_without_tls_and_auth(self):
        d = tempfile.mkdtemp(prefix="vgpu-ep-")
        crt, key = make_ca(d, "server")
        for listen in ("0.0.0.0:0", ":0", "[::]:0"):
            self.run_refused(["--listen", listen], "--tls-cert", "--client-ca", "--token-file")
        # TLS alone is not enough: anyone could still call /filter and /bind.
        self.run_refused(["--listen", "0.0.0.0:0", "--tls-cert", crt, "--tls-key", key],
                         "--client-ca", "--token-file")
        # Authentication without TLS would send the token in the clear.
        self.run_refused(["--listen", "0.0.0.0:0", "--client-ca", crt],
                         "--tls-cert", "--tls-key")
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("s3cret\n")
        self.run_refused(["--listen", "0.0.0.0:0", "--token-file", token],
                         "--tls-cert", "--tls-key")
        # Bad values are named.
        for bad in ("x", "-1", "1000001"):
            self.run_refused(["--max-assumptions-per-namespace", bad],
                             "--max-assumptions-per-namespace")
        self.run_refused(["--listen", "0.0.0.0:0", "--tls-cert", crt, "--tls-key", key,
                          "--client-ca", os.path.join(d, "missing.crt")], "missing.crt")
        empty = os.path.join(d, "empty")
        open(empty, "w").close()
        self.run_refused(["--listen", "0.0.0.0:0", "--tls-cert", crt, "--tls-key", key,
                          "--token-file", empty], "empty")
        spaced = os.path.join(d, "spaced")
        with open(spaced, "w") as f:
            f.write("two words\n")
        self.run_refused(["--listen", "0.0.0.0:0", "--tls-cert", crt, "--tls-key", key,
                          "--token-file", spaced], "spaced")


class Tls(Base):
    """An extender on 0.0.0.0 over TLS; requests go to 127.0.0.1."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-ep-tls-")
        self.server = make_ca(self.dir, "vgpu-scheduler")  # self-signed server certificate

    def start(self, *auth):
        self.cluster(["--listen", "0.0.0.0:0", "--tls-cert", self.server[0], "--tls-key",
                      self.server[1]] + list(auth), plain=False)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.call("GET", "/readyz")[0] == 200:
                    return
            except (OSError, ssl.SSLError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        self.fail("the TLS extender never became ready:\n" + self.c.log())

    def call(self, method, path, body=None, cert=None, headers=None):
        ctx = ssl.create_default_context(cafile=self.server[0])
        ctx.check_hostname = False
        if cert is not None:
            ctx.load_cert_chain(cert[0], cert[1])
        conn = http.client.HTTPSConnection("127.0.0.1", self.c.port, context=ctx, timeout=10)
        try:
            data = json.dumps(body).encode() if body is not None else None
            h = dict(headers or {})
            if data is not None:
                h["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            text = resp.read()
            return resp.status, text, resp
        finally:
            conn.close()

    def filter_args(self, pod):
        return {"Pod": pod, "Nodes": None, "NodeNames": self.names}

    def assert_plain_http_fails(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.c.port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException):
            status = None
        finally:
            conn.close()
        self.assertIsNone(status, "plain HTTP answered on the TLS extender")


class ClientCert(Tls):
    def test_client_certificates(self):
        ca = make_ca(self.dir, "scheduler-clients")
        good = make_signed(self.dir, "kube-scheduler", ca)
        other_ca = make_ca(self.dir, "someone-else")
        forged = make_signed(self.dir, "kube-scheduler-forged", other_ca)
        self.start("--client-ca", ca[0])
        pod = self.real_pod("real")
        # No certificate: refused (health probes, which carry none, still answer).
        for path in ("/filter", "/bind", "/prioritize"):
            status, text, _ = self.call("POST", path, self.filter_args(pod))
            self.assertEqual(status, 401, text)
            self.assertIn(b"client certificate", text)
        status, _, _ = self.call("GET", "/metrics")
        self.assertEqual(status, 401)
        self.assertEqual(self.call("GET", "/healthz")[0], 200)
        # A certificate from another CA: the handshake fails.
        with self.assertRaises((ssl.SSLError, OSError, http.client.HTTPException)):
            self.call("POST", "/filter", self.filter_args(pod), cert=forged)
        # A self-signed one with the same subject: the same.
        selfsigned = make_ca(self.dir, "self-signed", cn="kube-scheduler")
        with self.assertRaises((ssl.SSLError, OSError, http.client.HTTPException)):
            self.call("GET", "/metrics", cert=selfsigned)
        self.assert_plain_http_fails()
        # The right certificate: served.
        status, text, _ = self.call("POST", "/filter", self.filter_args(pod), cert=good)
        self.assertEqual(status, 200, text)
        self.assertEqual(len(json.loads(text)["NodeNames"]), 1, text)
        status, text, _ = self.call("GET", "/metrics", cert=good)
        self.assertEqual(status, 200)
        self.assertIn(b'vgpu_scheduler_errors_total{kind="unauthorized"} 4', text)


class BearerToken(Tls):
    TOKEN = "vgpu.Zm9vYmFy-_~+/xyz=="

    def test_bearer_token(self):
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w") as f:
            f.write(self.TOKEN + "\n")
        self.start("--token-file", token_file)
        with open("/proc/%d/cmdline" % self.c.sched.pid, "rb") as f:
            self.assertNotIn(self.TOKEN.encode(), f.read())
        pod = self.real_pod("real")
        args = self.filter_args(pod)
        wrong = [None, "Bearer", "Bearer ", "Bearer wrong", "Bearer " + self.TOKEN[:-1],
                 "Bearer " + self.TOKEN + "x", "Basic " + self.TOKEN, "bearer" + self.TOKEN,
                 "Bearer " + self.TOKEN + " extra", "Bearer " + self.TOKEN.upper()]
        for header in wrong:
            status, text, resp = self.call("POST", "/filter", args,
                                           headers={"Authorization": header} if header else {})
            self.assertEqual(status, 401, (header, text))
            self.assertIn("Bearer", resp.getheader("WWW-Authenticate", ""))
        self.assertEqual(self.tenants_over_tls(), 0)  # nothing was reserved by them
        self.assert_plain_http_fails()
        ok = {"Authorization": "Bearer " + self.TOKEN}
        status, text, _ = self.call("POST", "/filter", args, headers=ok)
        self.assertEqual(status, 200, text)
        self.assertEqual(len(json.loads(text)["NodeNames"]), 1, text)
        # The scheme is case-insensitive (RFC 7235), the token is not.
        status, _, _ = self.call("GET", "/metrics", headers={"Authorization":
                                                             "bEaReR  " + self.TOKEN})
        self.assertEqual(status, 200)

    def tenants_over_tls(self):
        status, text, _ = self.call("GET", "/metrics",
                                    headers={"Authorization": "Bearer " + self.TOKEN})
        self.assertEqual(status, 200)
        total = 0
        for line in text.decode().splitlines():
            if line.startswith("vgpu_scheduler_gpu_tenants{"):
                total += int(line.rsplit(" ", 1)[1])
        return total


class Paths(Base):
    def test_debug_state_is_off_by_default(self):
        nodes = [H.node_object("node-00", 1)]
        self.c = H.Cluster(BINARY, nodes, base_args=("--listen", "127.0.0.1:0"))
        self.c.wait_ready()
        for path in ("/debug/state", "/debug/state-bound"):
            status, _ = self.c.ext.request("GET", path)
            self.assertEqual(status, 404, path)
        self.assertEqual(self.c.ext.request("GET", "/metrics")[0], 200)  # still there
        self.c.stop()
        # With the flag: served.
        self.c = H.Cluster(BINARY, nodes, base_args=("--listen", "127.0.0.1:0",
                                                     "--debug-state"))
        self.c.wait_ready()
        self.assertEqual(self.c.state()["invariants"], "ok")

    def test_webhook_only_on_its_tls_port(self):
        d = tempfile.mkdtemp(prefix="vgpu-ep-")
        crt, key = make_ca(d, "vgpu-scheduler")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        wport = s.getsockname()[1]
        s.close()
        self.cluster(["--webhook-listen", "127.0.0.1:%d" % wport, "--tls-cert", crt,
                      "--tls-key", key])
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u-1", "operation": "CREATE",
                              "object": H.pod_object("w", {"nvidia.com/gpumem": "1000"})}}
        for path in ("/webhook", "/mutate"):
            status, body = self.c.ext.request("POST", path, review)
            self.assertEqual(status, 404, (path, body))
        ctx = ssl.create_default_context(cafile=crt)
        ctx.check_hostname = False

        def tls(method, path, body):
            conn = http.client.HTTPSConnection("127.0.0.1", wport, context=ctx, timeout=10)
            conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read()
            conn.close()
            return resp.status, text
        status, text = tls("POST", "/webhook", review)
        self.assertEqual(status, 200, text)
        self.assertEqual(json.loads(text)["response"]["uid"], "u-1")
        # Nor are the extender's verbs, metrics or state on the webhook's address.
        pod = self.real_pod("real")
        for path in ("/filter", "/bind", "/prioritize", "/metrics", "/debug/state"):
            status, text = tls("POST", path, {"Pod": pod, "Nodes": None,
                                              "NodeNames": self.names})
            self.assertEqual(status, 404, (path, text))
        self.assertEqual(self.tenants(), 0)


class Assumptions(Base):
    def test_filters_for_missing_pods_reserve_nothing(self):
        self.cluster(["--assume-ttl", "300"])  # no promise may expire while the test runs
        conn = H.Http(self.c.port)
        real = self.real_pod("real")
        ghosts = [H.pod_object("ghost-%d" % i, ONE_GPU) for i in range(10)]
        for i, g in enumerate(ghosts):
            g["metadata"]["uid"] = "00000000-0000-0000-0000-%012d" % i
        # One ghost borrows the real pod's name with another uid; one is the real pod
        # with a namespace that does not hold it.
        impostor = json.loads(json.dumps(real))
        impostor["metadata"]["uid"] = "11111111-2222-3333-4444-555555555555"
        elsewhere = json.loads(json.dumps(real))
        elsewhere["metadata"]["namespace"] = "other"
        results = [None] * 12

        def attack(k, pod):
            results[k] = self.c.filter(H.Http(self.c.port), pod, self.names)
        threads = [threading.Thread(target=attack, args=(k, p))
                   for k, p in enumerate(ghosts + [impostor, elsewhere])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for names, body in results:
            self.assertEqual(names, [], body)
            self.assertIn("not waiting for a node", body["Error"])
            self.assertIn("nothing reserved", body["Error"])
        self.assertEqual(self.tenants(), 0)
        status, text = conn.request("GET", "/metrics")
        self.assertIn('vgpu_scheduler_errors_total{kind="unknown_pod"}', text)
        # A real pod asking for a whole card still gets one, and so do five more.
        names, body = self.c.filter(conn, real, self.names)
        self.assertEqual(len(names), 1, body)
        self.assertEqual(self.c.bind(conn, real, names[0]), "")
        for i in range(self.NODES * self.GPUS - 1):
            pod = self.real_pod("more-%d" % i)
            names, body = self.c.filter(conn, pod, self.names)
            self.assertEqual(len(names), 1, body)
        # A bound pod's name cannot be filtered into a second promise either.
        self.assertEqual(self.tenants(), self.NODES * self.GPUS)

    def test_pod_the_watch_shows_late_still_fits(self):
        self.cluster(["--assume-ttl", "300"])  # the promises must outlast a loaded machine
        conn = H.Http(self.c.port)

        def admin(body, http=None):
            status, res = (http or self.c.apic).request("POST", "/admin/faults", body)
            self.assertEqual(status, 200, res)
        # The watch holds the new pod back for 0.3 s: the filter waits for it. (The timer
        # thread has its own connection: http.client connections are not thread-safe.)
        admin({"watch_paused": True})
        pod = self.real_pod("late")
        timer = threading.Timer(0.3, admin, args=({"watch_paused": False},
                                                  H.Http(self.c.api_port)))
        timer.start()
        t0 = time.time()
        names, body = self.c.filter(conn, pod, self.names)
        timer.join()
        self.assertEqual(len(names), 1, body)
        self.assertGreater(time.time() - t0, 0.2)
        # Held back longer than the filter waits: a retriable error, nothing reserved;
        # kube-scheduler's retry, once the watch shows the pod, fits.
        admin({"watch_paused": True})
        pod = self.real_pod("later")
        names, body = self.c.filter(conn, pod, self.names)
        self.assertEqual(names, [])
        self.assertIn("scheduling will be retried", body["Error"])
        self.assertEqual(self.tenants(), 1)
        admin({"watch_paused": False})
        time.sleep(0.3)
        names, body = self.c.filter(conn, pod, self.names)
        self.assertEqual(len(names), 1, body)
        self.assertEqual(self.tenants(), 2)

    def test_namespace_bound(self):
        self.cluster(["--max-assumptions-per-namespace", "3", "--assume-ttl", "300"])
        conn = H.Http(self.c.port)
        small = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "5"}
        team_a = [self.real_pod("a-%d" % i, small, ns="team-a") for i in range(5)]
        team_b = [self.real_pod("b-%d" % i, small, ns="team-b") for i in range(2)]
        fit = [self.c.filter(conn, p, self.names) for p in team_a]
        for names, body in fit[:3]:
            self.assertEqual(len(names), 1, body)
        for names, body in fit[3:]:
            self.assertEqual(names, [], body)
            self.assertIn("holds 3 outstanding GPU assumptions", body["Error"])
            self.assertIn("--max-assumptions-per-namespace", body["Error"])
        self.assertEqual(self.tenants(), 3)
        # Another namespace is not affected, and a filter again for a pod already
        # promised replaces its promise rather than counting twice.
        for p in team_b:
            self.assertEqual(len(self.c.filter(conn, p, self.names)[0]), 1)
        self.assertEqual(len(self.c.filter(conn, team_a[0], self.names)[0]), 1)
        self.assertEqual(self.tenants(), 5)
        # Once one is bound, the namespace may take one more.
        self.assertEqual(self.c.bind(conn, team_a[0], fit[0][0][0]), "")
        names, body = self.c.filter(conn, team_a[3], self.names)
        self.assertEqual(len(names), 1, body)
        names, body = self.c.filter(conn, team_a[4], self.names)
        self.assertEqual(names, [], body)
        status, text = conn.request("GET", "/metrics")
        self.assertIn('vgpu_scheduler_errors_total{kind="namespace_bound"} 3', text)


if __name__ == "__main__":
    warnings.simplefilter("ignore", ResourceWarning)
    BINARY = sys.argv.pop(1)
    vg_skip.main()
