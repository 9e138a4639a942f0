#!/usr/bin/env python3
"""vgpu-scheduler's webhook in DRA mode (--webhook-dra, docs/dra.md "HAMi pod specs under
DRA"), against the test API server: real AdmissionReviews over HTTPS, the returned JSON
Patch applied to the pod, the ResourceClaimTemplates read back from the API.

usage: dra_webhook_test.py VGPU_SCHEDULER_BINARY [unittest args]
"""
import base64
import copy
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scheduler_harness as H  # noqa: E402

BINARY = None
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
HAMI_KEYS = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
             "nvidia.com/gpucores")
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates"


def pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def apply_patch(doc, ops):
    """RFC 6902 add and remove (all the webhook writes); anything else fails the test."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = pointer(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]  # KeyError: removing what is not there is an error
        else:
            raise AssertionError("unexpected op %r" % op)
    return doc


def check_pod(pod):
    """The pod fields DRA adds, checked as kube-apiserver's validation does (python3-kubernetes
    22.6 has no PodResourceClaim type): claim names DNS labels, unique, each with exactly one
    source; every container claim names a pod claim."""
    spec = pod["spec"]
    names = []
    for c in spec.get("resourceClaims", []):
        assert DNS_LABEL.match(c["name"]) and len(c["name"]) <= 63, c
        assert c["name"] not in names, c
        names.append(c["name"])
        assert ("resourceClaimName" in c) != ("resourceClaimTemplateName" in c), c
        assert DNS_SUBDOMAIN.match(c.get("resourceClaimTemplateName") or c["resourceClaimName"])
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        for claim in c.get("resources", {}).get("claims", []):
            assert claim["name"] in names, (claim, names)


def check_template(t):
    """A ResourceClaimTemplate as resource.k8s.io/v1 validates it, for the fields used."""
    assert t["apiVersion"] == "resource.k8s.io/v1" and t["kind"] == "ResourceClaimTemplate"
    name = t["metadata"]["name"]
    assert DNS_SUBDOMAIN.match(name) and len(name) <= 253, name
    reqs = t["spec"]["spec"]["devices"]["requests"]
    assert len(reqs) == 1
    r = reqs[0]
    assert DNS_LABEL.match(r["name"])
    ex = r["exactly"]
    assert ex["deviceClassName"] in ("gpu.vgpu.io", "shared.gpu.vgpu.io")
    assert ex["allocationMode"] == "ExactCount" and 1 <= ex["count"] <= 128
    for k, v in ex.get("capacity", {}).get("requests", {}).items():
        assert k in ("memory", "cores") and re.match(r"^[0-9]+(Mi|Gi|Ti)?$", v), (k, v)
    for s in ex.get("selectors", []):
        assert set(s) == {"cel"} and 0 < len(s["cel"]["expression"]) <= 10 * 1024


class Attrs(dict):
    __getattr__ = dict.__getitem__


def cel_matches(expr, product, uuid):
    """Evaluates the CEL the selectors use (==, ||, !, lowerAscii, contains, string
    literals) on a device of driver gpu.vgpu.io."""
    py = expr.replace("||", " or ").replace(".lowerAscii()", ".lower()")
    py = py.replace(".contains(", ".__contains__(")
    py = re.sub(r"!(?!=)", " not ", py)
    device = Attrs(attributes={"gpu.vgpu.io": Attrs(productName=product, uuid=uuid)})
    return bool(eval(py, {"__builtins__": {}}, {"device": device}))  # noqa: S307


class DraWebhook(unittest.TestCase):
    EXTRA = ("--webhook-dra",)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vgpu-drawebhook-")
        self.pki = H.make_pki(self.dir)
        self.cert, self.key = self.pki["cert"], self.pki["key"]
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.wport = s.getsockname()[1]
        s.close()
        nodes = [H.node_object("node-%02d" % i, 2) for i in range(2)]
        # The webhook acts only for kube-apiserver, which presents its client certificate
        # (--webhook-client-ca); the reviews below do as it does.
        self.cluster = H.Cluster(BINARY, nodes, extra_args=[
            "--webhook-listen", "127.0.0.1:%d" % self.wport, "--tls-cert", self.cert,
            "--tls-key", self.key, "--webhook-client-ca", self.pki["ca"]] + list(self.EXTRA),
            namespaces=["default", "team-a", "kube-system", "vgpu-system"])
        self.cluster.wait_ready()
        self.api = self.cluster.apic

    def tearDown(self):
        self.cluster.stop()
        log = self.cluster.log()
        if os.environ.get("VGPU_TEST_LOG"):
            sys.stderr.write(log[-6000:])
        # Under the sanitizer build: no error and no leak, the late API answers included.
        for bad in ("Sanitizer", "runtime error:"):
            self.assertNotIn(bad, log, log[-4000:])

    def context(self):
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.check_hostname = False
        ctx.load_cert_chain(self.pki["client"], self.pki["client_key"])
        return ctx

    def review(self, pod, ns="default", dry_run=False, timeout=20):
        ctx = self.context()
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx,
                                           timeout=timeout)
        req = {"uid": "u-1", "operation": "CREATE", "namespace": ns, "object": pod}
        if dry_run:
            req["dryRun"] = True
        conn.request("POST", "/webhook", json.dumps({"apiVersion": "admission.k8s.io/v1",
                                                     "kind": "AdmissionReview",
                                                     "request": req}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        self.assertEqual(resp.status, 200)
        self.assertEqual(body["response"]["uid"], "u-1")
        return body["response"]

    def admit(self, pod, ns="default", dry_run=False):
        """The patched pod; fails the test when refused."""
        r = self.review(pod, ns, dry_run)
        self.assertTrue(r["allowed"], r.get("status"))
        if "patch" not in r:
            return pod, []
        self.assertEqual(r["patchType"], "JSONPatch")
        ops = json.loads(base64.b64decode(r["patch"]))
        out = apply_patch(pod, ops)
        check_pod(out)
        return out, ops

    def refused(self, pod, text, ns="default"):
        r = self.review(pod, ns)
        self.assertFalse(r["allowed"], r)
        self.assertIn(text, r["status"]["message"])
        return r["status"]["message"]

    def templates(self, ns="default"):
        status, body = self.api.request("GET", TEMPLATES % ns)
        self.assertEqual(status, 200, body)
        return {t["metadata"]["name"]: t for t in body["items"]}

    def template(self, name, ns="default"):
        status, body = self.api.request("GET", (TEMPLATES % ns) + "/" + name)
        self.assertEqual(status, 200, body)
        check_template(body)
        return body

    def faults(self, **kw):
        status, _ = self.api.request("POST", "/admin/faults", kw)
        self.assertEqual(status, 200)

    @staticmethod
    def pod(limits, annotations=None, name="p", ns="default", extra_limits=None):
        pod = H.pod_object(name, dict(limits, **(extra_limits or {})), annotations, ns)
        del pod["spec"]["schedulerName"]
        return pod


class ConvertTest(DraWebhook):
    def test_fraction_becomes_shared_claim(self):
        pod = self.pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000",
                        "nvidia.com/gpucores": "30", "cpu": "2"}, ns="team-a")
        pod["spec"]["containers"][0]["resources"]["requests"] = {
            "nvidia.com/gpumem": "4000", "cpu": "1"}
        out, ops = self.admit(pod, ns="team-a")
        c = out["spec"]["containers"][0]
        self.assertEqual(c["resources"]["limits"], {"cpu": "2"})
        self.assertEqual(c["resources"]["requests"], {"cpu": "1"})
        self.assertEqual(c["resources"]["claims"], [{"name": "vgpu-0"}])
        self.assertEqual(out["spec"]["resourceClaims"],
                         [{"name": "vgpu-0", "resourceClaimTemplateName": "vgpu-1-4000mi-30c"}])
        self.assertNotIn("schedulerName", out["spec"])  # kube-scheduler allocates claims
        t = self.template("vgpu-1-4000mi-30c", "team-a")
        self.assertEqual(t["spec"], {"spec": {"devices": {"requests": [{
            "name": "gpu", "exactly": {
                "deviceClassName": "shared.gpu.vgpu.io", "allocationMode": "ExactCount",
                "count": 1, "capacity": {"requests": {"memory": "4000Mi", "cores": "30"}}}}]}}})
        self.assertEqual(self.templates("default"), {})  # only in the pod's namespace

    def test_shapes(self):
        cases = [
            ({"nvidia.com/gpu": "1"}, "vgpu-1-whole", "gpu.vgpu.io", None, 1),
            ({"nvidia.com/gpu": 2}, "vgpu-2-whole", "gpu.vgpu.io", None, 2),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, "vgpu-1-whole",
             "gpu.vgpu.io", None, 1),
            ({"nvidia.com/gpumem": "8Gi"}, "vgpu-1-8192mi", "shared.gpu.vgpu.io",
             {"memory": "8Gi"}, 1),
            ({"nvidia.com/gpu": "2", "nvidia.com/gpucores": "50"}, "vgpu-2-50c",
             "shared.gpu.vgpu.io", {"cores": "50"}, 2),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}, "vgpu-1-whole",
             "gpu.vgpu.io", None, 1),
        ]
        for i, (limits, name, cls, caps, count) in enumerate(cases):
            with self.subTest(limits=limits):
                out, _ = self.admit(self.pod(limits, name="s%d" % i))
                self.assertEqual(out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
                                 name)
                ex = self.template(name)["spec"]["spec"]["devices"]["requests"][0]["exactly"]
                self.assertEqual(ex["deviceClassName"], cls)
                self.assertEqual(ex["count"], count)
                self.assertEqual(ex.get("capacity", {}).get("requests"), caps)

    def test_existing_claims_and_many_containers(self):
        pod = self.pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})
        spec = pod["spec"]
        spec["resourceClaims"] = [{"name": "net", "resourceClaimName": "nic-0"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "net"}]
        spec["containers"].append({"name": "side", "image": "x",
                                   "resources": {"limits": {"cpu": "1"}}})
        spec["containers"].append({"name": "second", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}}})
        spec["initContainers"] = [{"name": "warm", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": "1"}}}]
        out, ops = self.admit(pod)
        self.assertIn({"op": "add", "path": "/spec/resourceClaims/-",
                       "value": {"name": "vgpu-0",
                                 "resourceClaimTemplateName": "vgpu-1-2000mi"}}, ops)
        self.assertEqual(out["spec"]["resourceClaims"], [
            {"name": "net", "resourceClaimName": "nic-0"},
            {"name": "vgpu-init-0", "resourceClaimTemplateName": "vgpu-1-whole"},
            {"name": "vgpu-0", "resourceClaimTemplateName": "vgpu-1-2000mi"},
            {"name": "vgpu-2", "resourceClaimTemplateName": "vgpu-1-2000mi"}])
        cs = out["spec"]["containers"]
        self.assertEqual(cs[0]["resources"], {"limits": {}, "claims": [{"name": "net"},
                                                                       {"name": "vgpu-0"}]})
        # No GPU: untouched but for NVIDIA_VISIBLE_DEVICES=void (--overwrite-env).
        self.assertEqual(cs[1], dict(pod["spec"]["containers"][1], env=[
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]))
        self.assertEqual(cs[2]["resources"], {"limits": {}, "claims": [{"name": "vgpu-2"}]})
        self.assertEqual(out["spec"]["initContainers"][0]["resources"],
                         {"limits": {}, "claims": [{"name": "vgpu-init-0"}]})
        self.assertEqual(sorted(self.templates()), ["vgpu-1-2000mi", "vgpu-1-whole"])

    def test_zero_gpus_loses_the_keys(self):
        out, ops = self.admit(self.pod({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "1000",
                                        "cpu": "1"}))
        self.assertEqual(out["spec"]["containers"][0]["resources"], {"limits": {"cpu": "1"}})
        self.assertNotIn("resourceClaims", out["spec"])
        self.assertEqual(self.templates(), {})

    def test_no_claims_array_is_created_once(self):
        pod = self.pod({"nvidia.com/gpu": "1"})
        pod["spec"]["containers"].append({"name": "b", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": "1"}}})
        out, ops = self.admit(pod)
        self.assertEqual([o["path"] for o in ops if "resourceClaims" in o["path"]],
                         ["/spec/resourceClaims", "/spec/resourceClaims/-"])
        self.assertEqual([c["name"] for c in out["spec"]["resourceClaims"]],
                         ["vgpu-0", "vgpu-1"])

    def test_selectors(self):
        ann = {"nvidia.com/use-gputype": "A100, H100 80GB", "nvidia.com/nouse-gpuuuid":
               "GPU-0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"}
        out, _ = self.admit(self.pod({"nvidia.com/gpu": "1"}, ann))
        name = out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        self.assertRegex(name, r"^vgpu-1-whole-[0-9a-f]{8}$")
        sels = self.template(name)["spec"]["spec"]["devices"]["requests"][0]["exactly"][
            "selectors"]
        attr = "device.attributes['gpu.vgpu.io']"
        self.assertEqual([s["cel"]["expression"] for s in sels], [
            "%s.productName.lowerAscii().contains('a100') || "
            "%s.productName.lowerAscii().contains('h100 80gb')" % (attr, attr),
            "!(%s.uuid == 'GPU-0b1c2d3e-aaaa-bbbb-cccc-0123456789ab')" % attr])
        exprs = [s["cel"]["expression"] for s in sels]
        for product, uuid, want in [
                ("NVIDIA A100-SXM4-80GB", "GPU-1", True),
                ("NVIDIA H100 80GB HBM3", "GPU-2", True),
                ("NVIDIA H100 PCIe", "GPU-3", False),
                ("NVIDIA A100-SXM4-80GB", "GPU-0b1c2d3e-aaaa-bbbb-cccc-0123456789ab", False)]:
            self.assertEqual(all(cel_matches(e, product, uuid) for e in exprs), want,
                             (product, uuid))
        # Another selector set: another template; the same set: the same one.
        out2, _ = self.admit(self.pod({"nvidia.com/gpu": "1"},
                                      {"nvidia.com/use-gputype": "H100"}, name="q"))
        name2 = out2["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        self.assertNotEqual(name, name2)
        out3, _ = self.admit(self.pod({"nvidia.com/gpu": "1"}, ann, name="r"))
        self.assertEqual(out3["spec"]["resourceClaims"][0]["resourceClaimTemplateName"], name)

    def test_dry_run_creates_nothing(self):
        out, _ = self.admit(self.pod({"nvidia.com/gpu": "1"}), dry_run=True)
        self.assertEqual(out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
                         "vgpu-1-whole")
        self.assertEqual(self.templates(), {})

    def test_untouched(self):
        for pod in (H.pod_object("cpu", {"cpu": "1"}),
                    dict(self.pod({"nvidia.com/gpu": "1"}), spec=dict(
                        self.pod({"nvidia.com/gpu": "1"})["spec"], schedulerName="other"))):
            r = self.review(pod)
            self.assertTrue(r["allowed"])
            # Nothing but NVIDIA_VISIBLE_DEVICES=void for the container without a GPU.
            void = [{"op": "add", "path": "/spec/containers/0/env",
                     "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}]
            want = void if pod["metadata"]["name"] == "cpu" else None
            self.assertEqual(json.loads(base64.b64decode(r["patch"])) if "patch" in r
                             else None, want)
        claim_pod = self.pod({"cpu": "1"})
        claim_pod["spec"]["resourceClaims"] = [{"name": "gpu",
                                               "resourceClaimTemplateName": "whole-gpu"}]
        claim_pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        r = self.review(claim_pod)
        self.assertTrue(r["allowed"])
        self.assertNotIn("patch", r)
        self.assertEqual(self.templates(), {})

    def test_existing_template(self):
        self.admit(self.pod({"nvidia.com/gpu": "1"}, name="a"))
        before = self.template("vgpu-1-whole")
        self.admit(self.pod({"nvidia.com/gpu": "1"}, name="b"))  # 409, the same: fine
        self.assertEqual(self.template("vgpu-1-whole")["metadata"]["resourceVersion"],
                         before["metadata"]["resourceVersion"])
        other = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                 "metadata": {"name": "vgpu-1-2000mi"},
                 "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     "deviceClassName": "gpu.vgpu.io"}}]}}}}
        status, _ = self.api.request("POST", TEMPLATES % "default", other)
        self.assertEqual(status, 201)
        self.refused(self.pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
                     "vgpu: ResourceClaimTemplate default/vgpu-1-2000mi exists but asks for "
                     "something else")

    def test_api_failure_refuses(self):
        self.faults(fail_next=1, fail_status=500, match="resourceclaimtemplates")
        msg = self.refused(self.pod({"nvidia.com/gpu": "1"}),
                           "vgpu: creating ResourceClaimTemplate default/vgpu-1-whole failed")
        self.assertEqual(self.templates(), {}, msg)
        self.faults(fail_next=1, fail_status=403, match="resourceclaimtemplates")
        self.refused(self.pod({"nvidia.com/gpu": "1"}), "failed")
        # Once the API answers again, the same pod is admitted.
        self.admit(self.pod({"nvidia.com/gpu": "1"}))
        self.assertEqual(list(self.templates()), ["vgpu-1-whole"])

    def test_slow_api_refuses_in_time(self):
        self.faults(delay_ms=8000, delay_next=1, match="POST /apis/resource.k8s.io")
        t0 = time.time()
        self.refused(self.pod({"nvidia.com/gpu": "1"}), "did not answer in time")
        self.assertLess(time.time() - t0, 7.5)
        # The late answer arrives while the daemon keeps serving; it frees, nothing else.
        # (The test API server carries the delayed create out, then answers.)
        deadline = time.time() + 30
        while "vgpu-1-whole" not in self.templates() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        self.admit(self.pod({"nvidia.com/gpu": "1"}, name="later"))
        status, _ = self.cluster.ext.request("GET", "/healthz")
        self.assertEqual(status, 200)

    def test_bad_values(self):
        cases = [
            ({"nvidia.com/gpumem": "abc"}, "nvidia.com/gpumem"),
            ({"nvidia.com/gpumem": "-1"}, "nvidia.com/gpumem"),
            ({"nvidia.com/gpumem": -5}, "nvidia.com/gpumem is negative"),
            ({"nvidia.com/gpumem": "99999999999999"}, "nvidia.com/gpumem"),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"}, "over 100"),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "200000"},
             "more than the largest GPU in the cluster has"),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
             "nvidia.com/gpumem-percentage 50 cannot be a DRA claim"),
            ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, "above 100"),
            ({"nvidia.com/gpu": "99"}, "nvidia.com/gpu 99 is above"),
        ]
        for limits, text in cases:
            with self.subTest(limits=limits):
                msg = self.refused(self.pod(limits), text)
                self.assertTrue(msg.startswith("vgpu: "), msg)
        pod = self.pod({"nvidia.com/gpu": "1"})
        pod["spec"]["resourceClaims"] = [{"name": "vgpu-0", "resourceClaimName": "mine"}]
        self.refused(pod, "already has a resource claim named vgpu-0")
        pod = self.pod({"nvidia.com/gpu": "1"})
        pod["spec"]["nodeName"] = "node-00"
        self.refused(pod, "already names spec.nodeName")
        self.assertEqual(self.templates(), {})


class FlagOffTest(DraWebhook):
    """Without --webhook-dra the webhook mutates as before."""
    EXTRA = ()

    def test_no_claims(self):
        out, ops = self.admit(self.pod({"nvidia.com/gpumem": "4000"}))
        self.assertNotIn("resourceClaims", out["spec"])
        self.assertEqual(out["spec"]["schedulerName"], "vgpu-scheduler")
        self.assertEqual(out["spec"]["containers"][0]["resources"]["limits"],
                         {"nvidia.com/gpumem": "4000", "nvidia.com/gpu": "1"})
        self.assertEqual(self.templates(), {})


class KeepAliveTest(DraWebhook):
    """kube-apiserver keeps its connection to a webhook alive. Over TLS an answer left as
    several writes, and Nagle held the last until the client's delayed ACK: every review
    after the first took 40 ms or more (the kernel's minimum delayed-ACK time). The
    classic webhook (no --webhook-dra) had it too."""
    EXTRA = ()

    def test_reviews_on_one_connection_are_not_held(self):
        ctx = self.context()
        conn = http.client.HTTPSConnection("127.0.0.1", self.wport, context=ctx, timeout=20)
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": "u", "operation": "CREATE",
                                       "namespace": "default",
                                       "object": self.pod({"cpu": "1"})}})
        times = []
        for _ in range(21):
            t0 = time.perf_counter()
            conn.request("POST", "/webhook", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            self.assertTrue(json.loads(resp.read())["response"]["allowed"])
            times.append(time.perf_counter() - t0)
        conn.close()
        median = sorted(times)[len(times) // 2]
        self.assertLess(median, 0.030, ["%.1f ms" % (t * 1e3) for t in times])


class CliTest(unittest.TestCase):
    """--webhook-dra and the config key webhookDRA, as --check-config reports them."""

    def check(self, *args):
        r = subprocess.run([BINARY, "--check-config", "--webhook-client-ca", "/ca.crt"] +
                           list(args), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def test_flag_and_key(self):
        self.assertIn("webhook-dra=false\n", self.check()[1])
        self.assertIn("webhook-dra=true\n", self.check("--webhook-dra")[1])
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write('{"webhookDRA": true}')
            f.flush()
            self.assertIn("webhook-dra=true\n", self.check("--config", f.name)[1])
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write('{"webhookDRA": "yes"}')
            f.flush()
            rc, out = self.check("--config", f.name)
            self.assertEqual(rc, 2)
            self.assertIn('bad value for "webhookDRA"', out)
        rc, out = self.check("--webhook-dra=1")
        self.assertEqual(rc, 2)
        # Without a client CA the DRA mode would act for anyone who reaches the port.
        r = subprocess.run([BINARY, "--check-config", "--webhook-dra"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("it needs --webhook-client-ca", r.stderr)


class AttackTest(DraWebhook):
    """A pod author trying to get CEL or names of their choosing into the template, or to
    make vgpu write outside the pod's namespace (docs/security.md)."""

    def test_selector_injection_refused(self):
        bad = [
            ("nvidia.com/use-gputype", "A100') || true || ('"),
            ("nvidia.com/use-gputype", "A100\\"),
            ("nvidia.com/nouse-gputype", "x'.size() > 0 || '"),
            ("nvidia.com/use-gpuuuid", "GPU-1' || true || '"),
            ("nvidia.com/nouse-gpuuuid", "GPU 1"),
            ("nvidia.com/use-gputype", "A100\n|| true"),
            ("nvidia.com/use-gputype", "A100\""),
            ("nvidia.com/use-gputype", "A\u00e9100"),
        ]
        for key, value in bad:
            with self.subTest(key=key, value=value):
                msg = self.refused(self.pod({"nvidia.com/gpu": "1"}, {key: value}),
                                   "vgpu: ")
                self.assertTrue(key in msg, msg)
        self.assertEqual(self.templates(), {})

    def test_namespace_is_the_requests(self):
        pod = self.pod({"nvidia.com/gpu": "1"}, ns="kube-system")
        self.admit(pod, ns="team-a")
        self.assertEqual(list(self.templates("team-a")), ["vgpu-1-whole"])
        self.assertEqual(self.templates("kube-system"), {})
        self.refused(self.pod({"nvidia.com/gpu": "1"}), "not a DNS label", ns="../pods")

    def test_owner_must_exist(self):
        """A review for a pod whose ownerReferences name an owner that does not exist, or
        exists with another uid, creates nothing and says why; a real owner, a Node (a
        static pod's mirror) and no owner at all are fine."""
        rs = {"metadata": {"name": "web-7d9f", "uid": "6c1f0e5a-1111-4a4b-9c9d-000000000001"}}
        status, made = self.api.request("POST", "/apis/apps/v1/namespaces/default/replicasets", rs)
        self.assertEqual(status, 201, made)

        def owned(*owners, name="p"):
            pod = self.pod({"nvidia.com/gpu": "1"}, name=name)
            pod["metadata"]["ownerReferences"] = [dict(o, controller=True) for o in owners]
            return pod

        real = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                "uid": rs["metadata"]["uid"]}
        forged = [
            (dict(real, name="web-made-up"),
             "the pod's owner ReplicaSet web-made-up does not exist in namespace default"),
            (dict(real, uid="0badc0de-0000-4000-8000-000000000000"),
             "but that owner's uid is " + rs["metadata"]["uid"]),
            (dict(real, apiVersion="batch/v1", kind="Job", name="train"),
             "the pod's owner Job train does not exist in namespace default"),
            (dict(real, name="../../kube-system/replicasets/x"), "is malformed"),
            (dict(real, kind="replica/set"), "is malformed"),
            ({"kind": "ReplicaSet", "name": "web-7d9f"}, "is malformed"),
        ]
        for owner, text in forged:
            with self.subTest(owner=owner):
                self.refused(owned(owner), text)
                # a real owner beside a forged one is refused too
                self.refused(owned(real, owner), text)
        self.assertEqual(self.templates(), {})
        self.refused(owned(*([real] * 9)), "vgpu checks at most 8")
        self.assertEqual(self.templates(), {})
        self.admit(owned(real))
        self.assertEqual(list(self.templates()), ["vgpu-1-whole"])
        self.admit(self.pod({"nvidia.com/gpu": "1"}, name="bare"))
        node = {"apiVersion": "v1", "kind": "Node", "name": "node-00",
                "uid": self.api.request("GET", "/api/v1/nodes/node-00")[1]["metadata"]["uid"]}
        self.admit(owned(node, name="mirror"))

    def test_squatted_template_not_used(self):
        squat = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                 "metadata": {"name": "vgpu-1-4000mi"},
                 "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                     "deviceClassName": "gpu.vgpu.io", "allocationMode": "All"}}]}}}}
        status, _ = self.api.request("POST", TEMPLATES % "default", squat)
        self.assertEqual(status, 201)
        self.refused(self.pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}),
                     "exists but asks for something else")
        status, body = self.api.request("GET", (TEMPLATES % "default") + "/vgpu-1-4000mi")
        self.assertEqual(body["spec"], squat["spec"])


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
