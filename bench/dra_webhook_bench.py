#!/usr/bin/env python3
"""Latency of vgpu-scheduler's webhook in DRA mode (bench/dra_webhook.sh).

usage: dra_webhook_bench.py VGPU_SCHEDULER_BINARY [N]
Prints a markdown table: p50/p99 of the time from sending an AdmissionReview to reading
the answer, N reviews per case on one keep-alive HTTPS connection, one at a time.
"""
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import scheduler_harness as H  # noqa: E402


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def pod(limits, name):
    p = H.pod_object(name, limits)
    del p["spec"]["schedulerName"]
    return p


class Webhook:
    def __init__(self, binary, extra):
        self.dir = tempfile.mkdtemp(prefix="vgpu-drawebhook-bench-")
        pki = H.make_pki(self.dir)  # the bench plays kube-apiserver, with its certificate
        cert, key = pki["cert"], pki["key"]
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        nodes = [H.node_object("node-%02d" % i, 2) for i in range(2)]
        self.cluster = H.Cluster(binary, nodes, extra_args=[
            "--webhook-listen", "127.0.0.1:%d" % port, "--tls-cert", cert, "--tls-key", key,
            "--log-level", "error", "--webhook-client-ca", pki["ca"]] + extra,
            namespaces=["default", "vgpu-system"])
        self.cluster.wait_ready()
        ctx = ssl.create_default_context(cafile=cert)
        ctx.check_hostname = False
        ctx.load_cert_chain(pki["client"], pki["client_key"])
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        self.conn.connect()
        # Headers and body leave in two writes: without this, Nagle and the server's
        # delayed ACK add 40 ms to every review.
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def admit(self, obj):
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": "u", "operation": "CREATE",
                                       "namespace": "default", "object": obj}})
        t0 = time.perf_counter()
        self.conn.request("POST", "/webhook", body, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        answer = json.loads(resp.read())
        dt = time.perf_counter() - t0
        assert answer["response"]["allowed"], answer
        return dt

    def rss_kib(self):
        with open("/proc/%d/status" % self.cluster.sched.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.conn.close()
        self.cluster.stop()


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rows = []
    classic = Webhook(binary, [])
    for _ in range(20):
        classic.admit(pod({"nvidia.com/gpumem": "4000"}, "warm"))
    rows.append(("classic mode, HAMi pod (no API call)",
                 [classic.admit(pod({"nvidia.com/gpumem": "4000"}, "c")) for _ in range(n)]))
    classic.stop()
    # No template bound: the last row makes n templates in one namespace.
    dra = Webhook(binary, ["--webhook-dra", "--dra-max-templates-per-namespace", "0"])
    for _ in range(20):
        dra.admit(pod({"cpu": "1"}, "warm"))
    rows.append(("DRA mode, pod without GPUs (no API call)",
                 [dra.admit(pod({"cpu": "1"}, "c")) for _ in range(n)]))
    dra.admit(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}, "first"))
    rows.append(("DRA mode, template exists (GET namespace, POST 409 + GET)",
                 [dra.admit(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}, "e"))
                  for _ in range(n)]))
    rows.append(("DRA mode, new template (GET namespace, POST 201)",
                 [dra.admit(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(1000 + i)},
                                "n")) for i in range(n)]))
    rss = dra.rss_kib()
    dra.stop()
    print("| case | reviews | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- |")
    for name, times in rows:
        print("| %s | %d | %.2f | %.2f |" % (name, len(times), pct(times, 50) * 1e3,
                                             pct(times, 99) * 1e3))
    print()
    print("vgpu-scheduler RSS after the DRA-mode reviews: %d KiB" % rss)


if __name__ == "__main__":
    main()
