"""Installing vgpu's DRA driver (deploy/overlays/dra, deploy/dra/plugin, the components
dra-node-policy and dra-webhook; docs/dra.md, "Install"), made real.

    /usr/bin/python3 dra_deploy_test.py BUILD_DIR SOURCE_DIR DESCRIPTOR [unittest names...]

Render: the overlay and the overlay with each component render with `kubectl kustomize`;
every object of a type python3-kubernetes models survives its typed round trip (no field
the API lacks); the resource.k8s.io/v1 objects pass dra_manifests_test's schema; the
admission policy (no model in python3-kubernetes 22.6) its own; the plugin's DaemonSet
runs as documented (node selection, tolerations, priority, no privilege); the overlay
leaves the webhook's DRA mode out, the dra-webhook component adds its flag and role.
Flags: the plugin's command line runs with --check-config, which parses every flag, the
environment and the config file as a start would (exit 0; a flag it refuses exits 2 naming
the flag). The device plugin's part of the command line is checked by vgpu-device-plugin
--check-config, the same parser, which also yields the effective paths.
Mounts: every path the plugin reads or writes lies under a volume mount, the host paths
it hands to kubelet and the container runtime are mounted at the same path, every mount
is used; the init containers put libvgpu.so and ld.so.preload where the plugin's settings
say; vgpu-monitor watches the plugin's claim directories.
Run: the rendered plugin (init containers run first, with their own commands) registers
with the kubelet stand-in and prepares an allocated claim; every host path its CDI spec
names is one the container runtime finds on the host.
Rbac: the test API server enforces the rendered roles: the slice publisher
(tests/deploy/dra_publish.c, src/dra/slices.c run under the plugin's token) creates,
updates and deletes the node's slices, the plugin reads its claim, with no request
refused; each rule removed fails the run, naming the verb.
NoGpu: on a node without the driver the plugin stops with the reason, and the DaemonSet
keeps off nodes labelled vgpu.io/gpu-node=false.
Attacks (security.dra_deploy): the plugin's token, stolen, cannot change a claim's
allocation, the classes, pods, secrets or nodes.

An edited manifest fails naming the flag, path or rule: each check is also fed a near
miss. Skips through tests/lib/vg_skip.py (a failure under CI) when kubectl,
python3-kubernetes or python3-grpcio is missing.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "dra"))
import vg_skip  # noqa: E402
import deploy_test as dt  # noqa: E402  (skips without kubectl or python3-kubernetes)
import dra_manifests_test as dm  # noqa: E402

try:
    import grpc
    import dra_kubelet as dk
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-grpcio (%s; run with /usr/bin/python3)" % exc)

BUILD = SOURCE = DESCRIPTOR = None
SA = "system:serviceaccount:vgpu-system:vgpu-dra-plugin"
PLUGIN = "vgpu-dra-plugin"
DRIVER = "gpu.vgpu.io"
CLAIM_UID = "44444444-4444-4444-8444-444444444444"
SHARE = "55555555-5555-4555-8555-555555555555"
OWN_FLAGS = ("--kubelet-dir", "--cdi-dir", "--state-dir", "--driver-name")
OWN_BOOL_FLAGS = ("--consumable-capacity", "--idle-without-gpu")  # no separate value
# The plugin's defaults (src/cmd/vgpu-dra-plugin/main.c, docs/dra.md).
OWN_DEFAULTS = {"--kubelet-dir": "/var/lib/kubelet", "--cdi-dir": "/var/run/cdi",
                "--state-dir": "/var/lib/vgpu-dra", "--driver-name": DRIVER}
# Directories the container runtime reads CDI specs from (CDI's default spec dirs).
CDI_HOST_DIRS = ("/etc/cdi", "/var/run/cdi")

_rendered = {}


def render(components=()):
    """The DRA overlay's objects, with components. None for components with a kubectl
    whose kustomize has none (before 3.7: kubectl 1.20, Debian bookworm's); under CI,
    which has a newer one, that is a failure."""
    key = tuple(components)
    if key not in _rendered:
        deploy = os.path.join(SOURCE, "deploy")
        if not components:
            _rendered[key] = dt.kustomize(os.path.join(deploy, "overlays", "dra"))
            return copy.deepcopy(_rendered[key])
        tmp = tempfile.mkdtemp(prefix="vgpu-dra-deploy-")
        try:
            rel = lambda p: os.path.relpath(os.path.join(deploy, p), tmp)  # noqa: E731
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                f.write("resources:\n- %s\ncomponents:\n" % rel("overlays/dra"))
                for c in components:
                    f.write("- %s\n" % rel("components/" + c))
            try:
                _rendered[key] = dt.kustomize(tmp)
            except AssertionError as e:
                if vg_skip.in_ci() or ('unknown field "components"' not in str(e) and
                                       "must be a file" not in str(e)):
                    raise
                print("note: %s has no kustomize components (kubectl 1.21 or later has "
                      "them): %s not rendered" % (dt.KUBECTL, ", ".join(components)))
                _rendered[key] = None
        finally:
            shutil.rmtree(tmp)
    return copy.deepcopy(_rendered[key])


def plugin_container(objects):
    return dt.container(objects, PLUGIN, PLUGIN)


def expand(args, env):
    """Kubernetes' $(VAR) references in args, from the container's env."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def own_and_dp(args):
    """(the plugin's own flags {flag: value}, the rest: the device plugin's flags)."""
    own, rest, i = {}, [], 0
    while i < len(args):
        a = args[i]
        flag = a.split("=", 1)[0]
        if flag in OWN_BOOL_FLAGS:
            own[flag] = a.split("=", 1)[1] if "=" in a else "true"
        elif flag in OWN_FLAGS:
            if "=" in a:
                own[flag] = a.split("=", 1)[1]
            elif i + 1 < len(args):
                own[flag] = args[i + 1]
                i += 1
        else:
            rest.append(a)
        i += 1
    return own, rest


def local_args(args, tree):
    """rewrite_args, and --kubelet-dir (whose subdirectories are mounted, not itself) at
    the directory holding the local plugins_registry: a plugin under test never touches
    the machine's /var/lib/kubelet."""
    own, _ = own_and_dp(args)
    kdir = own.get("--kubelet-dir", OWN_DEFAULTS["--kubelet-dir"])
    reg = tree.local(kdir.rstrip("/") + "/plugins_registry")
    out = dt.rewrite_args(args, tree)
    if reg:
        out = [a for a in out if a.split("=", 1)[0] != "--kubelet-dir"]
        out.append("--kubelet-dir=" + os.path.dirname(reg))
    return out


def plugin_env(c, extra=None):
    env = dt.container_env(c, extra)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def fake_env(root):
    state = os.path.join(root, "fakegpu")
    os.makedirs(state, exist_ok=True)
    return {"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
            "FAKEGPU_DEVICES": dt.FAKE_DEVICES, "FAKEGPU_STATE_DIR": state}


def flag_problems(objects, root):
    """The plugin's command line, run: (problems, effective settings with container
    paths). Settings: the plugin's own flags and the device plugin's effective ones."""
    spec, c = plugin_container(objects)
    tree = dt.Tree(objects, spec, c, root)
    env = plugin_env(c, fake_env(root))
    args = expand(dt.container_args(c), env)
    shown = " ".join(dt.container_args(c))
    r = subprocess.run([os.path.join(BUILD, "bin", PLUGIN)] + local_args(args, tree) +
                       ["--check-config"], capture_output=True, text=True, env=env, timeout=30)
    first = tree.unlocal((r.stderr.strip().splitlines() or ["(no message)"])[0])
    if r.returncode != 0 or not r.stdout.rstrip().endswith("OK"):
        return ["%s: container %s: `%s` refused (exit %d): %s"
                % (PLUGIN, c["name"], shown, r.returncode, first)], {}
    own, dp_args = own_and_dp(args)
    r = subprocess.run([os.path.join(BUILD, "bin", "vgpu-device-plugin")] +
                       dt.rewrite_args(dp_args, tree) + ["--check-config"],
                       capture_output=True, text=True, env=env, timeout=30)
    if r.returncode != 0:
        return ["%s: container %s: the device plugin's settings `%s` refused: %s"
                % (PLUGIN, c["name"], " ".join(dp_args), tree.unlocal(r.stderr.strip()))], {}
    settings = {}
    for line in r.stdout.splitlines():
        sep = " = " if " = " in line else "="
        if sep in line:
            k, v = line.split(sep, 1)
            v = v.strip()
            if v.startswith('"') and v.endswith('"'):
                v = json.loads(v)
            settings[k.strip()] = tree.unlocal(v)
    for flag, default in OWN_DEFAULTS.items():
        settings[flag] = own.get(flag, default)
    for flag in OWN_BOOL_FLAGS:
        settings[flag] = own.get(flag, "false")
    return [], settings


def plugin_paths(settings):
    """(what, path, how the host sees it): every path vgpu-dra-plugin reads or writes.
    "same": a host path handed to kubelet or the container runtime, mounted at the same
    path; "cdi": the runtime's CDI directory; "any": only the plugin uses it."""
    kubelet, driver = settings["--kubelet-dir"], settings["--driver-name"]
    out = [("registration socket (--kubelet-dir)", kubelet + "/plugins_registry", "same"),
           ("DRA socket (--kubelet-dir)", "%s/plugins/%s" % (kubelet, driver), "same"),
           ("CDI specs (--cdi-dir)", settings["--cdi-dir"], "cdi"),
           ("claim directories (--state-dir)", settings["--state-dir"] + "/claims", "same"),
           ("checkpoint (--state-dir)", settings["--state-dir"], "any"),
           ("vgpu.libvgpuPath", settings["vgpu.libvgpuPath"], "same"),
           ("vgpu.ldSoPreloadPath", settings["vgpu.ldSoPreloadPath"], "same"),
           ("vgpu.computeBoardDir", settings["vgpu.computeBoardDir"], "same"),
           ("flags.plugin.containerDriverRoot", settings["flags.plugin.containerDriverRoot"],
            "any")]
    if settings.get("config", "null") not in ("null", ""):
        out.append(("--config", settings["config"], "any"))
    return out


def mount_problems(objects, settings):
    spec, c = plugin_container(objects)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = [(m["mountPath"].rstrip("/") or "/", m) for m in c.get("volumeMounts", [])]
    problems, used = [], set()
    for what, path, how in plugin_paths(settings):
        under = [(mp, m) for mp, m in mounts if path == mp or path.startswith(mp + "/")]
        if not under:
            problems.append("%s reads or writes %s (%s) but no volume is mounted there"
                            % (PLUGIN, path, what))
            continue
        mp, m = max(under, key=lambda u: len(u[0]))
        used.add(mp)
        host = volumes.get(m["name"], {}).get("hostPath", {}).get("path")
        on_host = host.rstrip("/") + path[len(mp):] if host else None
        if how == "same" and on_host != path:
            problems.append("%s: %s %s is mounted from host path %s, not the same path: "
                            "the node is handed %s" % (PLUGIN, what, path, host, path))
        if how == "cdi" and on_host not in CDI_HOST_DIRS:
            problems.append("%s: %s %s is host path %s, not a directory the container "
                            "runtime reads CDI specs from (%s)"
                            % (PLUGIN, what, path, on_host, ", ".join(CDI_HOST_DIRS)))
    for mp, m in mounts:
        if mp not in used:
            problems.append("%s: mount %s (volume %s) is a path %s never uses"
                            % (PLUGIN, mp, m["name"], PLUGIN))
    # The monitor's directories are the plugin's claim directories, on the same host path.
    mspec, mc = dt.container(objects, "vgpu-monitor", "vgpu-monitor")
    claims = settings["--state-dir"] + "/claims"
    cdir = dt.flag_value(dt.container_args(mc), "--region-dir")
    mvol = {v["name"]: v for v in mspec.get("volumes", [])}
    mhost = [mvol[m["name"]].get("hostPath", {}).get("path") for m in mc["volumeMounts"]
             if m["mountPath"] == cdir]
    if cdir != claims or mhost != [claims]:
        problems.append("vgpu-monitor watches %s (host path %s), not the plugin's claim "
                        "directories %s" % (cdir, mhost, claims))
    return problems


def init_problems(objects, settings):
    """The init containers install what the plugin's settings name."""
    spec, _ = plugin_container(objects)
    init = {i["name"]: i["command"] for i in spec.get("initContainers", [])}
    problems = []
    for what, install, mv, setting in (("libvgpu.so", "install-libvgpu", "rename-libvgpu",
                                        "vgpu.libvgpuPath"),
                                       ("ld.so.preload", "install-preload", "rename-preload",
                                        "vgpu.ldSoPreloadPath")):
        i, m = init.get(install), init.get(mv)
        if not i or not m or m[:2] != ["/bin/mv", "-f"] or m[2] != i[-1] or \
                m[3] != settings[setting] or os.path.dirname(m[2]) != os.path.dirname(m[3]):
            problems.append("init containers %s/%s do not install %s at %s (%s)"
                            % (install, mv, what, settings[setting], setting))
    cm = dt.one(objects, "ConfigMap", "vgpu-dra-preload")
    if cm["data"].get("ld.so.preload", "").strip() != settings["vgpu.libvgpuPath"]:
        problems.append("ConfigMap vgpu-dra-preload: ld.so.preload names %r, not "
                        "vgpu.libvgpuPath %s" % (cm["data"].get("ld.so.preload"),
                                                 settings["vgpu.libvgpuPath"]))
    return problems


# ---- the admission policy (python3-kubernetes 22.6 has no model for it) ---------------

VAP_SCHEMA = {
    "ValidatingAdmissionPolicy": {
        "apiVersion": "string", "kind": "string", "metadata": dm.META,
        "spec": {"failurePolicy": "string", "paramKind": "object",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["string"], "apiVersions": ["string"],
                     "operations": ["string"], "resources": ["string"],
                     "scope": "string", "resourceNames": ["string"]}],
                     "namespaceSelector": "object", "objectSelector": "object",
                     "matchPolicy": "string", "excludeResourceRules": ["object"]},
                 "matchConditions": [{"name": "string", "expression": "string"}],
                 "variables": [{"name": "string", "expression": "string"}],
                 "validations": [{"expression": "string", "message": "string",
                                  "messageExpression": "string", "reason": "string"}],
                 "auditAnnotations": ["object"]}},
    "ValidatingAdmissionPolicyBinding": {
        "apiVersion": "string", "kind": "string", "metadata": dm.META,
        "spec": {"policyName": "string", "paramRef": "object", "matchResources": "object",
                 "validationActions": ["string"]}},
}


def api_problems(objects):
    """Every rendered object: a typed round trip where python3-kubernetes has the type,
    the hand-written schemas for resource.k8s.io/v1 and the admission policy."""
    problems = []
    classes = {o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass"}
    for o in objects:
        av, kind = o.get("apiVersion"), o.get("kind")
        if av == "resource.k8s.io/v1":
            problems += dm.check_object(o, classes)
        elif av == "admissionregistration.k8s.io/v1" and kind in VAP_SCHEMA:
            errs = []
            dm.check_schema(o, VAP_SCHEMA[kind], kind, errs)
            problems += errs
        else:
            problems += dt.validate(o)
    return problems


def policy_problems(objects):
    vap = dt.one(objects, "ValidatingAdmissionPolicy", "vgpu-dra-plugin-own-node")
    bind = dt.one(objects, "ValidatingAdmissionPolicyBinding", "vgpu-dra-plugin-own-node")
    problems = []
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    if not any("resourceslices" in r["resources"] and "resource.k8s.io" in r["apiGroups"] and
               {"CREATE", "UPDATE", "DELETE"} <= set(r["operations"]) for r in rules):
        problems.append("the policy does not cover creating, updating and deleting "
                        "resource.k8s.io resourceslices")
    users = [m["expression"] for m in vap["spec"].get("matchConditions", [])]
    if not any("'%s'" % SA in u for u in users):
        problems.append("the policy does not match the plugin's service account %s" % SA)
    text = json.dumps(vap["spec"]["variables"])
    if "authentication.kubernetes.io/node-name" not in text:
        problems.append("the policy does not read the token's node name")
    if bind["spec"]["policyName"] != vap["metadata"]["name"] or \
            bind["spec"].get("validationActions") != ["Deny"]:
        problems.append("the binding does not deny through the policy")
    return problems


class Render(unittest.TestCase):
    def test_types_and_fields(self):
        for comps in ((), ("dra-node-policy",), ("dra-webhook",), ("dra-shared",),
                      ("dra-extended-resource",)):
            with self.subTest(components=comps):
                objects = render(comps)
                if objects is not None:
                    self.assertEqual(api_problems(objects), [])

    def test_shared_gpus_are_a_component(self):
        """Whole GPUs by default (the gate is off by default); dra-shared publishes them
        in consumable mode, and the plugin accepts the rendered command line."""
        _, c = plugin_container(render())
        self.assertNotIn("--consumable-capacity", dt.container_args(c))
        objects = render(("dra-shared",))
        if objects is None:  # no components in this kustomize
            return
        _, c = plugin_container(objects)
        self.assertIn("--consumable-capacity", dt.container_args(c))
        root = tempfile.mkdtemp(prefix="vgpu-dra-shared-")
        try:
            problems, settings = flag_problems(objects, root)
        finally:
            shutil.rmtree(root)
        self.assertEqual(problems, [])
        self.assertEqual(settings.get("--consumable-capacity"), "true")

    def test_extended_resource_is_a_component(self):
        """No class maps nvidia.com/gpu by default; dra-extended-resource adds one, which
        selects the driver's whole GPUs."""
        self.assertFalse([o for o in render() if o["kind"] == "DeviceClass" and
                          o["spec"].get("extendedResourceName")])
        objects = render(("dra-extended-resource",))
        if objects is None:  # no components in this kustomize
            return
        mapped = [o for o in objects if o["kind"] == "DeviceClass" and
                  o["spec"].get("extendedResourceName")]
        self.assertEqual([(o["metadata"]["name"], o["spec"]["extendedResourceName"])
                          for o in mapped], [("extended.gpu.vgpu.io", "nvidia.com/gpu")])
        gpu = dt.one(objects, "DeviceClass", "gpu.vgpu.io")
        self.assertEqual(mapped[0]["spec"]["selectors"], gpu["spec"]["selectors"])

    def test_a_wrong_field_is_named(self):
        objects = render(("dra-node-policy",))
        if objects is None:  # no components in this kustomize
            return
        _, c = plugin_container(objects)
        c["securityContext"]["privilged"] = True
        vap = dt.one(objects, "ValidatingAdmissionPolicy", "vgpu-dra-plugin-own-node")
        vap["spec"]["validation"] = vap["spec"].pop("validations")
        problems = api_problems(objects)
        self.assertIn("DaemonSet/vgpu-dra-plugin: spec.template.spec.containers[0]."
                      "securityContext.privilged: no such field", problems)
        self.assertIn("ValidatingAdmissionPolicy.spec.validation: unknown field", problems)

    def test_the_daemonset(self):
        objects = render()
        ds = dt.one(objects, "DaemonSet", PLUGIN)
        spec, c = plugin_container(objects)
        self.assertEqual(ds["metadata"]["namespace"], "vgpu-system")
        self.assertEqual(spec["priorityClassName"], "system-node-critical")
        self.assertEqual(spec["serviceAccountName"], PLUGIN)
        base = dt.one(dt.rendering("vgpu"), "DaemonSet", "vgpu-device-plugin")["spec"]["template"]["spec"]
        self.assertEqual(spec["affinity"], base["affinity"])
        self.assertEqual(spec["tolerations"], base["tolerations"])
        sc = c["securityContext"]
        self.assertFalse(sc.get("privileged", False))
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
        self.assertEqual(c["command"], ["/usr/bin/" + PLUGIN])
        self.assertFalse(any(m.get("mountPropagation") for m in c["volumeMounts"]))
        # The node name from the downward API.
        self.assertIn("--node-name=$(NODE_NAME)", c["args"])
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        # The image that carries the binary (images/vgpu-device-plugin.image).
        with open(os.path.join(SOURCE, "images", "vgpu-device-plugin.image")) as f:
            recipe = f.read()
        self.assertIn("/usr/bin/%s " % PLUGIN, recipe)
        self.assertTrue(c["image"].startswith("localhost/vgpu-device-plugin:"))
        # The classes come with the overlay.
        self.assertEqual(sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass"),
                         ["gpu.vgpu.io", "mig.vgpu.io", "shared.gpu.vgpu.io"])

    def test_webhook_dra_is_a_component(self):
        def sched_args(objects):
            hits = dt.find(objects, "Deployment", "vgpu-scheduler")
            if not hits:
                return None
            _, c = dt.container(objects, "vgpu-scheduler", "vgpu-scheduler")
            return dt.container_args(c)
        self.assertIsNone(sched_args(render()))  # not by default
        objects = render(("dra-webhook",))
        if objects is None:  # no components in this kustomize
            return
        self.assertIn("--webhook-dra", sched_args(objects))
        authz = dt.authz_from(objects)
        rules = authz["rules"]["system:serviceaccount:vgpu-system:vgpu-scheduler"]
        grants = {(r["apiGroups"][0], res, v, r["namespace"]) for r in rules
                  for res in r["resources"] for v in r["verbs"]}
        self.assertIn(("resource.k8s.io", "resourceclaimtemplates", "get", None), grants)
        self.assertIn(("resource.k8s.io", "resourceclaimtemplates", "create", None), grants)
        # The sweep lists and deletes unused templates; the namespace is checked first.
        self.assertIn(("resource.k8s.io", "resourceclaimtemplates", "list", None), grants)
        self.assertIn(("resource.k8s.io", "resourceclaimtemplates", "delete", None), grants)
        self.assertIn(("", "namespaces", "get", None), grants)
        # ... and the pod's owners, read back before anything is created.
        for group, res in (("apps", "replicasets"), ("apps", "statefulsets"),
                           ("apps", "daemonsets"), ("batch", "jobs"), ("", "nodes")):
            self.assertIn((group, res, "get", None), grants)
        # Only kube-apiserver's reviews are acted on: the client CA is passed and mounted.
        self.assertIn("--webhook-client-ca=/etc/vgpu/webhook-client-ca/ca.crt",
                      sched_args(objects))
        # It creates templates, except for dry-run reviews: kube-apiserver must know.
        hooks = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
        self.assertEqual([w["sideEffects"] for h in hooks for w in h["webhooks"]], ["NoneOnDryRun"])

    def test_webhook_component_dry_run(self):
        """The component's containers under --check-config: vgpu-scheduler takes
        --webhook-dra, and everything else the component renders is valid."""
        objects = render(("dra-webhook",))
        if objects is None:  # no components in this kustomize
            return
        self.assertEqual(dt.check_workloads(objects), [])
        _, c = dt.container(objects, "vgpu-scheduler", "vgpu-scheduler")
        c["args"].append("--webhook-dra=maybe")
        problems = dt.check_workloads(objects)
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("vgpu-scheduler: container vgpu-scheduler:"),
                        problems)

    def test_node_policy(self):
        objects = render(("dra-node-policy",))
        if objects is None:  # no components in this kustomize
            return
        self.assertEqual(policy_problems(objects), [])
        vap = dt.one(objects, "ValidatingAdmissionPolicy", "vgpu-dra-plugin-own-node")
        vap["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = ["CREATE"]
        vap["spec"]["matchConditions"][0]["expression"] = "true"
        self.assertEqual(policy_problems(objects), [
            "the policy does not cover creating, updating and deleting resource.k8s.io "
            "resourceslices",
            "the policy does not match the plugin's service account " + SA])


class Flags(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="vgpu-dra-flags-")

    def tearDown(self):
        shutil.rmtree(self.root)

    def test_command_line_is_accepted(self):
        problems, settings = flag_problems(render(), self.root)
        self.assertEqual(problems, [])
        self.assertEqual(settings["--kubelet-dir"], "/var/lib/kubelet")
        self.assertEqual(settings["--state-dir"], "/var/lib/vgpu-dra")
        # Every flag of the plugin's own the manifest passes is in its --help.
        help_text = subprocess.run([os.path.join(BUILD, "bin", PLUGIN), "--help"],
                                   capture_output=True, text=True).stdout
        _, c = plugin_container(render())
        for a in dt.container_args(c):
            flag = a.split("=", 1)[0]
            with self.subTest(flag=flag):
                self.assertRegex(help_text, re.escape(flag) + r"[ \[]")  # [=true|false]

    def test_a_wrong_flag_is_named(self):
        for edit, needle in ((lambda c: c["args"].append("--sate-dir=/var/lib/vgpu-dra"),
                              "--sate-dir"),
                             (lambda c: c["args"].__setitem__(3, "--state-dir="),
                              "--state-dir is empty"),
                             (lambda c: c["args"].append("--compute-board-dir"),
                              "--compute-board-dir")):
            objects = render()
            _, c = plugin_container(objects)
            edit(c)
            problems, _ = flag_problems(objects, self.root)
            with self.subTest(needle=needle):
                self.assertEqual(len(problems), 1, problems)
                self.assertIn("refused (exit 2)", problems[0])
                self.assertIn(needle, problems[0].split("refused (exit 2)")[1])


class Mounts(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="vgpu-dra-mounts-")

    def tearDown(self):
        shutil.rmtree(self.root)

    def settings(self, objects):
        problems, settings = flag_problems(objects, self.root)
        self.assertEqual(problems, [])
        return settings

    def test_every_path_is_mounted(self):
        objects = render()
        settings = self.settings(objects)
        self.assertEqual(mount_problems(objects, settings), [])
        self.assertEqual(init_problems(objects, settings), [])
        # The monitor itself: its --check-config and its mounts.
        self.assertEqual(dt.check_workloads(objects), [])

    def test_a_wrong_mount_is_named(self):
        def edit(fn):
            objects = render()
            spec, c = plugin_container(objects)
            fn(spec, c)
            return mount_problems(objects, self.settings(objects))

        def drop_mount(name):
            return lambda s, c: c.__setitem__("volumeMounts", [
                m for m in c["volumeMounts"] if m["name"] != name])

        def host_path(name, path):
            def fn(s, c):
                for v in s["volumes"]:
                    if v["name"] == name:
                        v["hostPath"]["path"] = path
            return fn
        self.assertIn("vgpu-dra-plugin reads or writes /var/lib/vgpu-dra/claims (claim "
                      "directories (--state-dir)) but no volume is mounted there",
                      edit(drop_mount("state")))
        self.assertIn("vgpu-dra-plugin reads or writes /var/lib/kubelet/plugins/gpu.vgpu.io "
                      "(DRA socket (--kubelet-dir)) but no volume is mounted there",
                      edit(drop_mount("plugins")))
        self.assertIn("vgpu-dra-plugin: registration socket (--kubelet-dir) "
                      "/var/lib/kubelet/plugins_registry is mounted from host path "
                      "/var/lib/kubelet/registry, not the same path: the node is handed "
                      "/var/lib/kubelet/plugins_registry",
                      edit(host_path("plugins-registry", "/var/lib/kubelet/registry")))
        self.assertIn("vgpu-dra-plugin: CDI specs (--cdi-dir) /var/run/cdi is host path "
                      "/tmp/cdi, not a directory the container runtime reads CDI specs from "
                      "(/etc/cdi, /var/run/cdi)", edit(host_path("cdi", "/tmp/cdi")))

        def extra(s, c):
            c["volumeMounts"].append({"name": "dev", "mountPath": "/dev"})
            s["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}})
        self.assertIn("vgpu-dra-plugin: mount /dev (volume dev) is a path vgpu-dra-plugin "
                      "never uses", edit(extra))

    def test_a_wrong_init_or_monitor_is_named(self):
        objects = render()
        settings = self.settings(objects)
        spec, _ = plugin_container(objects)
        spec["initContainers"] = [i for i in spec["initContainers"]
                                  if i["name"] != "rename-preload"]
        self.assertEqual(init_problems(objects, settings), [
            "init containers install-preload/rename-preload do not install ld.so.preload "
            "at /usr/local/vgpu/ld.so.preload (vgpu.ldSoPreloadPath)"])
        objects = render()
        _, mc = dt.container(objects, "vgpu-monitor", "vgpu-monitor")
        mc["args"] = dt.replace_flag(mc["args"], "--region-dir", "/usr/local/vgpu/containers")
        self.assertIn("vgpu-monitor watches /usr/local/vgpu/containers (host path []), not "
                      "the plugin's claim directories /var/lib/vgpu-dra/claims",
                      mount_problems(objects, settings))


class NoGpu(unittest.TestCase):
    def test_a_node_without_a_driver_idles(self):
        """The rendered plugin on a node without the NVIDIA driver (the DaemonSet runs on
        every Linux node not labelled vgpu.io/gpu-node=false) logs the reason once and
        idles until stopped, exit 0, instead of crash-looping; without
        --idle-without-gpu it stops at once with the reason."""
        objects = render()
        spec, c = plugin_container(objects)
        root = tempfile.mkdtemp(prefix="vgpu-dra-nogpu-")
        try:
            tree = dt.Tree(objects, spec, c, root)
            env = plugin_env(c, {"LD_LIBRARY_PATH": "/nonexistent"})
            args = local_args(expand(dt.container_args(c), env), tree)
            self.assertIn("--idle-without-gpu", args)
            with tempfile.TemporaryFile("w+") as log:
                p = subprocess.Popen([os.path.join(BUILD, "bin", PLUGIN)] + args,
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
                deadline = time.monotonic() + 30
                text = ""
                while "idle until stopped" not in text and p.poll() is None:
                    self.assertLess(time.monotonic(), deadline, text)
                    time.sleep(0.05)
                    log.seek(0)
                    text = log.read()
                self.assertIsNone(p.poll(), text)
                self.assertIn("is the NVIDIA driver installed?", text)
                p.terminate()
                self.assertEqual(p.wait(10), 0)
            strict = [a for a in args if a != "--idle-without-gpu"]
            r = subprocess.run([os.path.join(BUILD, "bin", PLUGIN)] + strict,
                               capture_output=True, text=True, env=env, timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("is the NVIDIA driver installed?", r.stderr)
            r = subprocess.run([os.path.join(BUILD, "bin", PLUGIN), "--idle-without-gpu=maybe"]
                               + strict, capture_output=True, text=True, env=env, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--idle-without-gpu takes true or false, not 'maybe'", r.stderr)
        finally:
            shutil.rmtree(root)
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertIn({"key": "vgpu.io/gpu-node", "operator": "NotIn", "values": ["false"]},
                      terms["nodeSelectorTerms"][0]["matchExpressions"])


# ---- running it ------------------------------------------------------------------------


class Node:
    """One node of the rendered plugin: its init containers and the plugin itself, with
    the container paths at the node's host paths under box.dir."""

    def __init__(self, box, objects, user=SA):
        self.box = box
        spec, c = plugin_container(objects)
        root = os.path.join(box.dir, "node-1")
        self.tree = dt.Tree(objects, spec, c, root)
        env = plugin_env(c, fake_env(root))
        # The init containers, with their own commands; the image's libvgpu.so is the build's.
        for init in spec["initContainers"]:
            itree = dt.Tree(objects, spec, init, root)
            cmd = [a.replace("/usr/lib/vgpu/libvgpu.so", os.path.join(BUILD, "lib", "libvgpu.so"))
                   for a in init["command"]]
            cmd = [itree.local(a) or a if a.startswith("/") and i > 0 else a
                   for i, a in enumerate(cmd)]
            subprocess.run(cmd, check=True, capture_output=True)
        args = local_args(expand(dt.container_args(c), env), self.tree)
        if not any(a.startswith("--kubelet-dir=" + root) for a in args):
            raise AssertionError("the registration directory is not mounted: %s" % args)
        args.append("--kubeconfig=" + box.kubeconfig(user))
        env["VGPU_DRA_SOCKET_CHECK_MS"] = "100"
        self.proc = box.spawn("dra-plugin", [os.path.join(BUILD, "bin", PLUGIN)] + args, env)
        self.reg = self.tree.local("/var/lib/kubelet/plugins_registry/%s-reg.sock" % DRIVER)
        # The socket file exists from bind(), before listen(): wait for the log line.
        try:
            dt.wait_for(lambda: "DRA plugin serving" in box.log("dra-plugin") or
                        self.proc.poll() is not None, timeout=20, what="the plugin serving")
        except AssertionError:
            pass
        if self.proc.poll() is not None:
            raise AssertionError("the plugin exited: " + box.log("dra-plugin"))
        if not os.path.exists(self.reg):
            raise AssertionError("no registration socket: " + box.log("dra-plugin")[-2000:])
        self.channels = []

    def channel(self, path):
        ch = grpc.insecure_channel("unix://" + path,
                                   options=[("grpc.use_local_subchannel_pool", 1)])
        self.channels.append(ch)
        return ch

    def register(self):
        info = dk.call(self.channel(self.reg), "/pluginregistration.Registration/GetInfo",
                       dk.M["InfoRequest"](), "PluginInfo")
        return info

    def prepare(self, endpoint, ns, uid, name):
        return dk.call(self.channel(endpoint), dk.V1 + "NodePrepareResources",
                       dk.claims_msg("NodePrepareResourcesRequest", (ns, uid, name)),
                       "NodePrepareResourcesResponse")

    def close(self):
        for ch in self.channels:
            ch.close()


def make_claim(box):
    """An allocated claim for 10 GiB and 30 % of gpu-0 on node-1, as the scheduler
    leaves it."""
    base = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": "train-gpu", "namespace": "default", "uid": CLAIM_UID},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
               "deviceClassName": "shared.gpu.vgpu.io",
               "capacity": {"requests": {"memory": "10Gi", "cores": "30"}}}}]}}}
    status, obj = box.api("POST", base, obj)
    assert status == 201, (status, obj)
    obj["status"] = {"allocation": {"devices": {"results": [dk.result(
        memory="10Gi", cores="30", share=SHARE)]}}}
    status, obj = box.api("PUT", base + "/train-gpu/status", obj)
    assert status == 200, (status, obj)


def run_plugin(box, objects, user=SA):
    """Registers and prepares the claim; (node, response of the claim)."""
    make_claim(box)
    node = Node(box, objects, user)
    info = node.register()
    resp = node.prepare(info.endpoint, "default", CLAIM_UID, "train-gpu")
    return node, info, resp.claims[CLAIM_UID]


class Run(unittest.TestCase):
    def test_registers_and_prepares(self):
        objects = render()
        box = dt.Box(objects)
        node = None
        try:
            node, info, claim = run_plugin(box, objects)
            self.assertEqual(claim.error, "", box.log("dra-plugin"))
            # kubelet dials the endpoint on the host: the same path as in the container.
            self.assertEqual(node.tree.unlocal(info.endpoint),
                             "/var/lib/kubelet/plugins/%s/dra.sock" % DRIVER)
            self.assertEqual(info.name, DRIVER)
            self.assertEqual([d.device_name for d in claim.devices], ["gpu-0"])
            # The CDI spec is in the runtime's directory; every host path it names is on
            # the host, where the runtime looks.
            cdi = node.tree.local("/var/run/cdi")
            files = os.listdir(cdi)
            self.assertEqual(files, ["vgpu.io-gpu_%s.json" % CLAIM_UID])
            with open(os.path.join(cdi, files[0])) as f:
                spec = json.load(f)
            host = os.path.join(box.dir, "node-1", "host")
            paths = [m["hostPath"] for d in spec["devices"]
                     for m in d["containerEdits"].get("mounts", [])]
            self.assertTrue(paths)
            for p in paths:
                with self.subTest(path=node.tree.unlocal(p)):
                    self.assertTrue(p.startswith(host + "/"), p)
                    self.assertTrue(os.path.exists(p), p)
            # libvgpu.so and the preload file the init containers installed.
            with open(node.tree.local("/usr/local/vgpu/ld.so.preload")) as f:
                self.assertEqual(f.read().strip(), "/usr/local/vgpu/libvgpu.so")
            self.assertTrue(os.access(node.tree.local("/usr/local/vgpu/libvgpu.so"), os.X_OK))
        finally:
            if node:
                node.close()
            codes = box.stop()
        self.assertEqual(codes.get("dra-plugin"), 0)


# ---- RBAC ------------------------------------------------------------------------------


def scenario(objects, authz):
    """The plugin's API calls under authz: publication (2 GPUs in 2 slices, then 1: a
    create, an update and a delete) and a prepare. Returns the problems."""
    box = dt.Box(objects, authz)
    problems, node = [], None
    try:
        kubeconfig = box.kubeconfig(SA)
        for i, (devices, what) in enumerate(((dt.FAKE_DEVICES, "publishing 2 GPUs"),
                                             (dt.FAKE_DEVICES.split(",")[0], "publishing 1 GPU"))):
            env = dict(fake_env(os.path.join(box.dir, "publish-%d" % i)), FAKEGPU_DEVICES=devices,
                       PATH=os.environ.get("PATH", ""))
            r = subprocess.run([os.path.join(BUILD, "tests", "dra_publish"), "--kubeconfig",
                                kubeconfig, "--node-name", "node-1", "--max-devices", "1",
                                "--timeout-ms", "3000"], capture_output=True, text=True,
                               env=env, timeout=60)
            if r.returncode != 0:
                problems.append("%s: %s" % (what, r.stderr.strip()))
                break
        if not problems:
            status, body = box.api("GET", "/apis/resource.k8s.io/v1/resourceslices")
            names = sorted(s["metadata"]["name"] for s in body["items"])
            if names != ["node-1-gpu.vgpu.io-0"]:
                problems.append("slices after publishing: %s" % names)
        node, _, claim = run_plugin(box, objects)
        if claim.error:
            problems.append("prepare: " + claim.error)
    except AssertionError as e:
        problems.append(str(e))
    finally:
        if node:
            node.close()
        forbidden = box.forbidden()
        box.stop()
    return problems + ["refused by the API server (403): " + f for f in forbidden]


class Rbac(unittest.TestCase):
    def test_rendered_role_suffices(self):
        objects = render()
        self.assertEqual(scenario(objects, dt.authz_from(objects)), [])

    def test_role_is_exactly_what_is_called(self):
        role = dt.one(render(), "ClusterRole", PLUGIN)
        flat = sorted("%s/%s:%s" % (g, res, v) for r in role["rules"] for g in r["apiGroups"]
                      for res in r["resources"] for v in r["verbs"])
        self.assertEqual(flat, ["/nodes:get", "resource.k8s.io/resourceclaims:get",
                                "resource.k8s.io/resourceslices:create",
                                "resource.k8s.io/resourceslices:delete",
                                "resource.k8s.io/resourceslices:list",
                                "resource.k8s.io/resourceslices:update"])

    def test_a_missing_verb_fails(self):
        objects = render()
        authz = dt.authz_from(objects)
        for resource, verb, needle in (
                ("resourceslices", "list", SA + " list resourceslices /"),
                ("resourceslices", "create", SA + " create resourceslices /"),
                ("resourceslices", "update", SA + " update resourceslices /node-1-gpu.vgpu.io-0"),
                ("resourceslices", "delete", SA + " delete resourceslices /node-1-gpu.vgpu.io-1"),
                ("resourceclaims", "get", SA + " get resourceclaims default/train-gpu"),
                ("nodes", "get", SA + " get nodes /node-1")):
            with self.subTest(resource=resource, verb=verb):
                problems = scenario(objects, dt.without_verb(authz, SA, resource, verb))
                self.assertTrue(any(needle in p for p in problems), problems)


class Attacks(unittest.TestCase):
    """Someone holding vgpu-dra-plugin's token (a compromised node or plugin) under the
    rendered role: each write that would give a claim more of a GPU, redirect the
    classes, start a pod or read what is not the plugin's is refused (403) and changes
    nothing."""

    def test_stolen_plugin_token(self):
        objects = render()
        box = dt.Box(objects, dt.authz_from(objects))
        try:
            make_claim(box)
            base = "/apis/resource.k8s.io/v1"
            claim_path = base + "/namespaces/default/resourceclaims/train-gpu"
            before = box.api("GET", claim_path)[1]
            greedy = copy.deepcopy(before)
            greedy["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
                "memory": "16Gi", "cores": "100"}
            token = box.tokens[SA]
            attempts = (
                ("PUT", claim_path + "/status", greedy, "update resourceclaims/status"),
                ("PUT", claim_path, greedy, "update resourceclaims"),
                ("GET", base + "/resourceclaims", None, "list resourceclaims"),
                ("DELETE", base + "/deviceclasses/gpu.vgpu.io", None, "delete deviceclasses"),
                ("POST", base + "/deviceclasses", {
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": "evil"}, "spec": {}}, "create deviceclasses"),
                ("POST", "/api/v1/namespaces/default/pods", {
                    "metadata": {"name": "evil", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}, "create pods"),
                ("GET", "/api/v1/namespaces/default/secrets", None, "list secrets"),
                ("PATCH", "/api/v1/nodes/node-1", {"metadata": {"labels": {"x": "y"}}},
                 "patch nodes"),
            )
            for method, path, body, what in attempts:
                with self.subTest(what=what):
                    conn = dt.http.client.HTTPConnection("127.0.0.1", box.api_port, timeout=30)
                    ctype = "application/merge-patch+json" if method == "PATCH" \
                        else "application/json"
                    conn.request(method, path, json.dumps(body) if body is not None else None,
                                 {"Content-Type": ctype, "Authorization": "Bearer " + token})
                    r = conn.getresponse()
                    r.read()
                    conn.close()
                    self.assertEqual(r.status, 403, what)
                    self.assertTrue(any(f.startswith("%s %s" % (SA, what))
                                        for f in box.forbidden()), box.forbidden())
            after = box.api("GET", claim_path)[1]
            self.assertEqual(after["status"], before["status"])
            self.assertEqual(box.api("GET", "/api/v1/nodes/node-1")[1]["metadata"].get(
                "labels", {}).get("x"), None)
            self.assertEqual(box.api("GET", base + "/deviceclasses/evil")[0], 404)
        finally:
            box.stop()


if __name__ == "__main__":
    BUILD, SOURCE, DESCRIPTOR = (os.path.abspath(a) for a in sys.argv[1:4])
    dt.BUILD, dt.SOURCE = BUILD, SOURCE
    dm.SOURCE = SOURCE
    dk.BUILD, dk.SOURCE = BUILD, SOURCE
    dk.load_messages(DESCRIPTOR)
    unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
