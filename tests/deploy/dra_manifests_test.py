#!/usr/bin/env python3
"""vgpu's DRA manifests (deploy/dra/): DeviceClasses and example ResourceClaimTemplates.

    /usr/bin/python3 dra_manifests_test.py SOURCE_DIR [unittest names...]

Debian's python3-kubernetes (22.6 in bookworm) has no models for resource.k8s.io/v1, so
the objects are checked against a hand-written schema of the v1 types' fields
(kubernetes/api resource/v1 types.go, 1.35): an unknown or misspelt field, a wrong type,
a request name that is not a DNS label, a class the claim names that does not exist, a
capacity or attribute the driver does not publish, all fail with the field's path. The
DeviceClasses' CEL selectors are evaluated (their `&&`/`||`/`==` subset, translated to
Python) against devices as the driver publishes them, so each class is shown to select
exactly the devices docs/dra.md says it does. Each check is also fed a near miss and
must refuse it.
"""
import copy
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import vg_skip  # noqa: E402

try:
    import yaml
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-yaml (%s; run with /usr/bin/python3)" % exc)

SOURCE = None
DRIVER = "gpu.vgpu.io"
# What the driver publishes (src/dra/slices.c; docs/dra.md).
ATTRIBUTES = {"type", "uuid", "parentUUID", "profile", "productName", "architecture",
              "cudaComputeCapability", "driverVersion", "index", "minor", "numaNode"}
CAPACITIES = {"memory", "cores"}

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[mkMGTPE]|)$")

# resource.k8s.io/v1 (1.35) fields used by classes and claims. A dict is an object with
# exactly these optional fields; [x] a list of x; strings name scalar kinds.
META = {"name": "string", "namespace": "string", "labels": {"*": "string"},
        "annotations": {"*": "string"}}
SELECTOR = {"cel": {"expression": "string"}}
OPAQUE = {"opaque": {"driver": "string", "parameters": "object"}}
TOLERATION = {"key": "string", "operator": "string", "value": "string", "effect": "string",
              "tolerationSeconds": "int"}
EXACT = {"deviceClassName": "string", "selectors": [SELECTOR], "allocationMode": "mode",
         "count": "int", "adminAccess": "bool", "tolerations": [TOLERATION],
         "capacity": {"requests": {"*": "quantity"}}}
SUBREQUEST = dict(EXACT, name="dns_label")
REQUEST = {"name": "dns_label", "exactly": EXACT, "firstAvailable": [SUBREQUEST]}
CLAIM_SPEC = {"devices": {"requests": [REQUEST],
                          "constraints": [{"requests": ["string"], "matchAttribute": "string",
                                           "distinctAttribute": "string"}],
                          "config": [dict(OPAQUE, requests=["string"])]}}
SCHEMAS = {
    "DeviceClass": {"apiVersion": "string", "kind": "string", "metadata": META,
                    "spec": {"selectors": [SELECTOR], "config": [OPAQUE],
                             "extendedResourceName": "string"}},
    "ResourceClaimTemplate": {"apiVersion": "string", "kind": "string", "metadata": META,
                              "spec": {"metadata": META, "spec": CLAIM_SPEC}},
}


def check_schema(value, schema, path, errs):
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            errs.append("%s: not an object" % path)
            return
        for key, sub in value.items():
            if key in schema:
                check_schema(sub, schema[key], "%s.%s" % (path, key), errs)
            elif "*" in schema:
                check_schema(sub, schema["*"], "%s[%s]" % (path, key), errs)
            else:
                errs.append("%s.%s: unknown field" % (path, key))
    elif isinstance(schema, list):
        if not isinstance(value, list):
            errs.append("%s: not a list" % path)
            return
        for i, item in enumerate(value):
            check_schema(item, schema[0], "%s[%d]" % (path, i), errs)
    else:
        ok = {"string": isinstance(value, str), "object": isinstance(value, dict),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "bool": isinstance(value, bool),
              "dns_label": isinstance(value, str) and len(value) <= 63 and
              bool(DNS_LABEL.match(value)),
              "mode": value in ("ExactCount", "All"),
              "quantity": isinstance(value, str) and bool(QUANTITY.match(value))}[schema]
        if not ok:
            errs.append("%s: %r is not a valid %s" % (path, value, schema))


def check_object(obj, classes):
    """Everything wrong with one manifest object, as 'path: problem' strings."""
    errs = []
    kind = obj.get("kind")
    if obj.get("apiVersion") != "resource.k8s.io/v1" or kind not in SCHEMAS:
        return ["%s: not a resource.k8s.io/v1 DeviceClass or ResourceClaimTemplate" % kind]
    check_schema(obj, SCHEMAS[kind], kind, errs)
    if not (obj.get("metadata") or {}).get("name"):
        errs.append("%s.metadata.name: required" % kind)
    if kind == "DeviceClass":
        for i, sel in enumerate(obj["spec"].get("selectors", [])):
            expr = sel["cel"]["expression"]
            for name in re.findall(r"\.attributes\['([^']*)'\]\.(\w+)", expr):
                if name != (DRIVER, name[1]) or name[1] not in ATTRIBUTES:
                    errs.append("%s.spec.selectors[%d]: attribute %s/%s is not published"
                                % (kind, i, name[0], name[1]))
        return errs
    devices = obj["spec"]["spec"].get("devices", {})
    names = set()
    for i, req in enumerate(devices.get("requests", [])):
        path = "%s.spec.spec.devices.requests[%d]" % (kind, i)
        names.add(req.get("name"))
        if ("exactly" in req) == ("firstAvailable" in req):
            errs.append(path + ": exactly one of exactly and firstAvailable is required")
        for sub in [req.get("exactly")] + (req.get("firstAvailable") or []):
            if sub is None:
                continue
            if sub.get("deviceClassName") not in classes:
                errs.append("%s: deviceClassName %r is not one of vgpu's classes"
                            % (path, sub.get("deviceClassName")))
            for cap in (sub.get("capacity") or {}).get("requests", {}):
                if cap not in CAPACITIES:
                    errs.append("%s: capacity %r is not published" % (path, cap))
            if "count" in sub and sub.get("allocationMode", "ExactCount") != "ExactCount":
                errs.append(path + ": count needs allocationMode ExactCount")
    for i, con in enumerate(devices.get("constraints", [])):
        path = "%s.spec.spec.devices.constraints[%d]" % (kind, i)
        for r in con.get("requests", []):
            if r not in names:
                errs.append("%s: request %r does not exist" % (path, r))
        attr = con.get("matchAttribute") or con.get("distinctAttribute") or ""
        domain, _, ident = attr.rpartition("/")
        if domain != DRIVER or ident not in ATTRIBUTES:
            errs.append("%s: %r is not a fully qualified attribute the driver publishes"
                        % (path, attr))
    return errs


class Device:
    """A device as CEL sees it: device.driver, device.attributes['domain'].name, ..."""

    class Domain:
        def __init__(self, values):
            self._values = values

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            if name not in self._values:
                raise KeyError(name)  # CEL: no such key -> the selector errors, no match
            return self._values[name]

    def __init__(self, driver, attrs, multiple):
        self.driver = driver
        self.attributes = {driver: Device.Domain(attrs)}
        self.allowMultipleAllocations = multiple


def cel_matches(expr, device):
    """Evaluates the CEL subset the classes use (==, !=, &&, ||, !, string literals)."""
    py = expr.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", py))
    try:
        return bool(eval(py, {"__builtins__": {}}, {"device": device}))  # noqa: S307
    except KeyError:
        return False


def gpu(multiple):
    return Device(DRIVER, {"type": "gpu", "uuid": "GPU-1", "productName": "NVIDIA H100"},
                  multiple)


MIG = Device(DRIVER, {"type": "mig", "uuid": "MIG-1", "profile": "1g.10gb"}, False)
NVIDIA_GPU = Device("gpu.nvidia.com", {"type": "gpu"}, False)


def load_all():
    objs = []
    root = os.path.join(SOURCE, "deploy", "dra")
    for dirpath, dirs, files in os.walk(root):
        # plugin/: the node plugin's Kubernetes objects (tests/deploy/dra_deploy_test.py).
        dirs[:] = [d for d in dirs if d != "plugin"]
        for f in sorted(files):
            if f.endswith(".yaml") and f != "kustomization.yaml":
                with open(os.path.join(dirpath, f)) as fh:
                    objs += [(f, o) for o in yaml.safe_load_all(fh) if o]
    return objs


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.objs = load_all()
        self.classes = {o["metadata"]["name"]: o for _, o in self.objs
                        if o.get("kind") == "DeviceClass"}

    def test_kustomization_lists_the_classes(self):
        with open(os.path.join(SOURCE, "deploy", "dra", "kustomization.yaml")) as f:
            kust = yaml.safe_load(f)
        self.assertEqual(kust["resources"], ["deviceclasses.yaml"])

    def test_every_object_is_a_valid_v1_object(self):
        kinds = sorted(o["kind"] for _, o in self.objs)
        self.assertEqual(kinds.count("DeviceClass"), 3)
        self.assertEqual(kinds.count("ResourceClaimTemplate"), 3)
        for f, obj in self.objs:
            with self.subTest(f, name=obj["metadata"]["name"]):
                self.assertEqual(check_object(obj, self.classes), [])

    def test_near_misses_are_refused(self):
        tmpl = next(o for f, o in self.objs if f == "gpu-10gi-30pct.yaml")
        req = ["spec", "spec", "devices", "requests", 0]

        def mutated(change):
            obj = copy.deepcopy(tmpl)
            target = obj
            for k in req:
                target = target[k]
            change(target)
            return check_object(obj, self.classes)

        cases = {
            "capacity without requests": (lambda r: r["exactly"].__setitem__(
                "capacity", {"memory": "10Gi"}), "unknown field"),
            "misspelt field": (lambda r: r["exactly"].__setitem__("deviceClass", "x"),
                               "exactly.deviceClass: unknown field"),
            "unknown class": (lambda r: r["exactly"].__setitem__("deviceClassName",
                                                                  "gpu.nvidia.com"),
                              "not one of vgpu's classes"),
            "unpublished capacity": (lambda r: r["exactly"]["capacity"]["requests"].__setitem__(
                "multiprocessors", "4"), "capacity 'multiprocessors' is not published"),
            "bad quantity": (lambda r: r["exactly"]["capacity"]["requests"].__setitem__(
                "memory", "10 GiB"), "is not a valid quantity"),
            "request name": (lambda r: r.__setitem__("name", "GPU_0"), "valid dns_label"),
            "both kinds": (lambda r: r.__setitem__("firstAvailable", []),
                           "exactly one of exactly and firstAvailable"),
        }
        for what, (change, text) in cases.items():
            with self.subTest(what):
                errs = mutated(change)
                self.assertTrue(any(text in e for e in errs), errs)
        two = copy.deepcopy(next(o for f, o in self.objs if f == "two-gpus-same-model.yaml"))
        two["spec"]["spec"]["devices"]["constraints"][0]["matchAttribute"] = "productName"
        self.assertTrue(any("fully qualified" in e for e in check_object(two, self.classes)))
        cls = copy.deepcopy(self.classes["gpu.vgpu.io"])
        cls["spec"]["selectors"][0]["cel"]["expression"] += \
            " && device.attributes['gpu.vgpu.io'].memoryGiB == 80"
        self.assertTrue(any("memoryGiB is not published" in e
                            for e in check_object(cls, self.classes)))

    def test_classes_select_what_the_docs_say(self):
        devices = {"shared gpu": gpu(True), "whole gpu": gpu(False), "mig": MIG,
                   "other driver": NVIDIA_GPU}
        want = {"gpu.vgpu.io": {"shared gpu", "whole gpu"},
                "shared.gpu.vgpu.io": {"shared gpu"},
                "mig.vgpu.io": {"mig"}}
        for name, cls in self.classes.items():
            with self.subTest(name):
                got = {d for d, dev in devices.items()
                       if all(cel_matches(s["cel"]["expression"], dev)
                              for s in cls["spec"]["selectors"])}
                self.assertEqual(got, want[name])
        # The evaluator is not vacuous: a wrong driver name matches nothing.
        self.assertFalse(cel_matches("device.driver == 'gpu.vgpu.iox'", gpu(True)))
        self.assertTrue(cel_matches("!(device.driver == 'x') && true", gpu(True)))

    def test_examples(self):
        by_name = {o["metadata"]["name"]: o for _, o in self.objs
                   if o["kind"] == "ResourceClaimTemplate"}
        shared = by_name["gpu-10gi-30pct"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        self.assertEqual(shared["deviceClassName"], "shared.gpu.vgpu.io")
        self.assertEqual(shared["capacity"]["requests"], {"memory": "10Gi", "cores": "30"})
        two = by_name["two-gpus-same-model"]["spec"]["spec"]["devices"]
        self.assertEqual(two["requests"][0]["exactly"]["count"], 2)
        self.assertEqual(two["constraints"][0]["matchAttribute"], "gpu.vgpu.io/productName")
        whole = by_name["whole-gpu"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        self.assertEqual(whole, {"deviceClassName": "gpu.vgpu.io"})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: dra_manifests_test.py SOURCE_DIR [unittest names...]")
    SOURCE = sys.argv.pop(1)
    unittest.main()
