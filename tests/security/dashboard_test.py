#!/usr/bin/env python3
"""vgpu-scheduler's dashboard and metrics attacked (docs/security.md, "The dashboard and
its JSON"). Each test plays the attacker against a real vgpu-scheduler and the test API
server and asserts that the attack changes nothing:

  UriCrash      a request line whose URI libevent cannot parse (GET /metrics?%zz), sent
                by a client that has not authenticated, does not take the scheduler down;
  UiAuth        over TLS with --token-file, /ui, /ui/state.json and /ui/explain answer
                401 without the token, like every other route, and are served with it;
  Markup        a node inventory whose GPU model name is HTML and script (whoever can
                patch a node's annotations writes it) is shown as text in the page:
                no element, no script runs (headless Chromium), and the page carries a
                Content-Security-Policy that allows its own script only.

usage: dashboard_test.py VGPU_SCHEDULER_BINARY [unittest args]
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import endpoints_test as E  # noqa: E402
import scheduler_harness as H  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def raw_request(port, data):
    """Sends data as it is and returns what comes back (b"" when the peer just closes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


class UriCrash(E.Base):
    def test_unparsable_uri_does_not_crash(self):
        self.cluster()
        for uri in (b"/metrics?%zz", b"/filter?a=%", b"/ui/explain?%zz", b"/?%",
                    b"/ui?%%%%", b"http://[::1/metrics"):
            raw_request(self.c.port, b"GET " + uri + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.05)
            self.assertIsNone(self.c.sched.poll(),
                              "GET %r took vgpu-scheduler down:\n%s" % (uri, self.c.log()))
            self.assertEqual(self.c.ext.request("GET", "/healthz")[0], 200)
        self.assertEqual(self.c.ext.request("GET", "/ui/state.json")[0], 200)


class UiAuth(E.Tls):
    TOKEN = "dashboard-token_0123456789"

    def test_ui_needs_the_token(self):
        token_file = os.path.join(self.dir, "token")
        with open(token_file, "w") as f:
            f.write(self.TOKEN + "\n")
        self.start("--token-file", token_file)
        ok = {"Authorization": "Bearer " + self.TOKEN}
        for path in ("/ui", "/ui/", "/ui/state.json", "/ui/explain?pod=x", "/ui/nope"):
            for header in (None, "Bearer wrong", "Bearer " + self.TOKEN[:-1]):
                status, text, resp = self.call("GET", path,
                                               headers={"Authorization": header}
                                               if header else {})
                self.assertEqual(status, 401, (path, header, text[:200]))
                self.assertNotIn(b"node-0", text)
        status, text, resp = self.call("GET", "/ui/state.json", headers=ok)
        self.assertEqual(status, 200, text)
        self.assertEqual(len(json.loads(text)["nodes"]), self.NODES)
        status, text, resp = self.call("GET", "/ui", headers=ok)
        self.assertEqual(status, 200)
        self.assertIn(b"<title>vgpu dashboard</title>", text)
        self.assertIn("script-src 'sha256-", resp.getheader("Content-Security-Policy"))
        self.assertEqual(resp.getheader("X-Frame-Options"), "DENY")
        self.assert_plain_http_fails()


class Markup(unittest.TestCase):
    EVIL = "<img src=x onerror=document.title=7>"  # a model name is at most 63 bytes
    EVIL2 = "<script>document.title=7</script>"

    def test_model_name_is_text(self):
        if not os.access(CHROMIUM, os.X_OK):
            E.missing(CHROMIUM + " (Debian package chromium)")
        nodes = [H.node_object("node-x", 1, model=self.EVIL),
                 H.node_object("node-y", 1, model=self.EVIL2)]
        c = H.Cluster(E.BINARY, nodes)
        profile = tempfile.mkdtemp(prefix="vgpu-chromium-")
        try:
            c.wait_ready()
            status, state = c.ext.request("GET", "/ui/state.json")
            self.assertEqual(state["nodes"][0]["gpus"][0]["model"], self.EVIL)
            r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                "--no-first-run", "--user-data-dir=" + profile,
                                "--virtual-time-budget=5000", "--dump-dom",
                                "http://127.0.0.1:%d/ui" % c.port],
                               capture_output=True, timeout=120)
            dom = r.stdout.decode()
            self.assertIn("data-render-ms", dom, r.stderr.decode()[-2000:])
            self.assertNotIn("<img", dom)
            self.assertEqual(dom.count("<script"), 1)  # the page's own, nothing injected
            self.assertIn("<title>vgpu dashboard</title>", dom)
            self.assertNotIn("<title>7</title>", dom)
            self.assertIn("&lt;img src=x", dom)  # shown, as text
            self.assertIn("&lt;script&gt;document.title", dom)
        finally:
            c.stop()
            shutil.rmtree(profile, ignore_errors=True)


def main():
    E.BINARY = sys.argv[1]
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)


if __name__ == "__main__":
    main()
