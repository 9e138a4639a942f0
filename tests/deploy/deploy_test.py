"""The manifests under deploy/, made real (docs/install.md).

    /usr/bin/python3 deploy_test.py BUILD_DIR SOURCE_DIR [unittest names...]

Render: every overlay (and the vgpu overlay with both components) renders with
`kubectl kustomize`, and every object is one of the Kubernetes API's types with no field
the type lacks (python3-kubernetes' models: the object is deserialized into its typed
model and serialized again, and whatever did not survive the round trip is a field the
API does not have); the KubeSchedulerConfiguration's fields are those of
kubescheduler.config.k8s.io/v1.
Flags: every container that runs one of vgpu's binaries is started with its command,
args and env plus --check-config, which parses and validates everything as the daemon
would and prints the effective settings; a flag the binary lacks fails with its name.
Names: every daemon in every rendering (the DRA overlay and its components too) is started
with its flags' canonical names: those its --help lists, none it lists as an alias
("alias of --NAME"), and every daemon lists --check-config.
Mounts: every path the binary reads (the effective settings, table READS) lies under a
volume mount, host paths handed to kubelet are mounted at the same path, and every mount
is one the binary reads.
Scheduler: the extender's verbs from the KubeSchedulerConfiguration are routes the
running vgpu-scheduler serves, at the address its --listen names; the webhook's Service,
path and port reach the running webhook.
Rbac: the test API server enforces the rendered ClusterRoles, Roles and bindings (one
bearer token per service account); device plugin, scheduler and monitor run a pod
through placement and Allocate under them, with no request refused; each role without
one of the verbs it needs fails the run, naming the verb.
NoGpu: the rendered device plugin and monitor on a node without a driver stay up with a
clear log line (no crash loop).

A manifest edited wrongly (a flag that does not exist, a missing mount) fails with the
exact flag or path: the Flags and Mounts cases mutate a rendered manifest to prove it.
Skips through tests/lib/vg_skip.py (a failure under CI) when kubectl or
python3-kubernetes is missing.
"""
import copy
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import vg_skip  # noqa: E402

try:
    import yaml
    import kubernetes.client
except ImportError as exc:  # pragma: no cover
    vg_skip.skip("python3-kubernetes (%s; run with /usr/bin/python3)" % exc)

KUBECTL = os.environ.get("VGPU_KUBECTL") or shutil.which("kubectl")
if not KUBECTL:
    vg_skip.skip("kubectl (Debian's kubernetes-client) for `kubectl kustomize`")

BUILD = SOURCE = None
OVERLAYS = ("vgpu", "time-slicing", "mps", "mig", "volcano")
COMPONENTS = ("monitoring", "cert-manager")
BINARIES = ("vgpu-scheduler", "vgpu-device-plugin", "vgpu-monitor")
FAKE_DEVICES = "NVIDIA H100 80GB HBM3:16GiB:132,NVIDIA H100 80GB HBM3:16GiB:132"

# ---- rendering ----------------------------------------------------------------------

_rendered = {}


def kustomize(directory):
    r = subprocess.run([KUBECTL, "kustomize", directory], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("kubectl kustomize %s: %s" % (directory, r.stderr.strip()))
    return [o for o in yaml.safe_load_all(r.stdout) if o]


COMBINED = "vgpu+" + "+".join(COMPONENTS)


def rendering(name):
    """The objects of one overlay, or of COMBINED (the vgpu overlay with every
    component), rendered once per process. None: COMBINED with a kustomize that has no
    components."""
    if name not in _rendered:
        deploy = os.path.join(SOURCE, "deploy")
        if name != COMBINED:
            _rendered[name] = kustomize(os.path.join(deploy, "overlays", name))
            return _rendered[name]
        tmp = tempfile.mkdtemp(prefix="vgpu-deploy-")
        try:
            rel = lambda p: os.path.relpath(os.path.join(deploy, p), tmp)  # noqa: E731
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                f.write("resources:\n- %s\ncomponents:\n" % rel("overlays/vgpu"))
                for c in COMPONENTS:
                    f.write("- %s\n" % rel("components/" + c))
            try:
                _rendered[name] = kustomize(tmp)
            except AssertionError as e:
                # kustomize before 3.7 (kubectl 1.20, Debian bookworm's) has no
                # components; docs/install.md says they need a newer one.
                # Under CI, which has a newer kubectl, that is a failure: the components'
                # checks would pass by not running.
                if vg_skip.in_ci() or 'unknown field "components"' not in str(e):
                    raise
                print("note: %s has no kustomize components (kubectl 1.21 or later has "
                      "them): the components are not rendered" % KUBECTL)
                _rendered[name] = None
        finally:
            shutil.rmtree(tmp)
    return _rendered[name]


def renderings():
    """{name: objects} for every overlay and the vgpu overlay with every component."""
    out = {name: rendering(name) for name in OVERLAYS + (COMBINED,)}
    return {k: v for k, v in out.items() if v is not None}


def find(objects, kind, name=None):
    hits = [o for o in objects if o["kind"] == kind and
            (name is None or o["metadata"]["name"] == name or
             o["metadata"]["name"].startswith(name + "-"))]
    return hits


def one(objects, kind, name):
    hits = find(objects, kind, name)
    assert len(hits) == 1, "%s %s: %d objects" % (kind, name, len(hits))
    return hits[0]


# ---- API types ---------------------------------------------------------------------

API = kubernetes.client.ApiClient()

# Custom resources python3-kubernetes has no model for: the fields of their spec that
# vgpu uses, from the projects' API references (prometheus-operator's ServiceMonitor,
# cert-manager's Certificate and Issuer).
CRD_SPEC_FIELDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels",
        "podTargetLabels", "sampleLimit"},
    ("cert-manager.io/v1", "Certificate"): {
        "secretName", "duration", "renewBefore", "dnsNames", "ipAddresses", "issuerRef",
        "commonName", "usages", "privateKey", "isCA", "subject", "uris"},
    ("cert-manager.io/v1", "Issuer"): {"selfSigned", "ca", "acme", "vault", "venafi"},
}

# kubescheduler.config.k8s.io/v1 (https://kubernetes.io/docs/reference/config-api/
# kube-scheduler-config.v1/): the fields of the parts vgpu's configuration uses.
KSC_FIELDS = {
    "": {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
         "healthzBindAddress", "metricsBindAddress", "enableProfiling",
         "enableContentionProfiling", "percentageOfNodesToScore",
         "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders",
         "delayCacheUntilActive"},
    "leaderElection": {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod",
                       "resourceLock", "resourceName", "resourceNamespace"},
    "profiles[]": {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"},
    "extenders[]": {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight",
                    "bindVerb", "enableHTTPS", "tlsConfig", "httpTimeout",
                    "nodeCacheCapable", "managedResources", "ignorable"},
    "extenders[].managedResources[]": {"name", "ignoredByScheduler"},
}


def lost_fields(a, b, path=""):
    """Where a (the manifest) has something b (its round trip) lost or changed."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            yield "%s: %r is not an object here" % (path or "/", a)
            return
        for k, v in a.items():
            sub = "%s.%s" % (path, k) if path else k
            if k not in b or b[k] is None and v is not None:
                yield "%s: no such field" % sub
            else:
                yield from lost_fields(v, b[k], sub)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            yield "%s: not a list here" % path
            return
        for i, (x, y) in enumerate(zip(a, b)):
            yield from lost_fields(x, y, "%s[%d]" % (path, i))
    elif a != b and not (isinstance(a, bool) is isinstance(b, bool) and a == b):
        yield "%s: %r is not of the field's type" % (path, a)


def validate(obj):
    """Problems with one rendered object, each naming kind/name and the field."""
    kind, av = obj.get("kind", ""), obj.get("apiVersion", "")
    label = "%s/%s" % (kind, obj.get("metadata", {}).get("name", "?"))
    if (av, kind) in CRD_SPEC_FIELDS:
        extra = set(obj.get("spec", {})) - CRD_SPEC_FIELDS[(av, kind)]
        return ["%s: spec.%s: no such field" % (label, k) for k in sorted(extra)]
    version = av.split("/")[-1]
    model = version[0].upper() + version[1:] + kind
    if not hasattr(kubernetes.client, model):
        return ["%s: %s is not a Kubernetes API type" % (label, av)]
    try:
        typed = API._ApiClient__deserialize(obj, model)
    except (ValueError, TypeError) as e:
        return ["%s: %s" % (label, e)]
    back = API.sanitize_for_serialization(typed)
    return ["%s: %s" % (label, p) for p in lost_fields(obj, back)]


def scheduler_config(objects):
    cm = one(objects, "ConfigMap", "vgpu-scheduler-config")
    return yaml.safe_load(cm["data"]["kube-scheduler.yaml"])


def validate_scheduler_config(cfg):
    problems = []
    if cfg.get("apiVersion") != "kubescheduler.config.k8s.io/v1" or \
            cfg.get("kind") != "KubeSchedulerConfiguration":
        problems.append("not a kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration")

    def check(value, where):
        allowed = KSC_FIELDS[where]
        for k in sorted(set(value) - allowed):
            problems.append("KubeSchedulerConfiguration: %s%s: no such field"
                            % (where + "." if where else "", k))
    check(cfg, "")
    check(cfg.get("leaderElection", {}), "leaderElection")
    for p in cfg.get("profiles", []):
        check(p, "profiles[]")
    for e in cfg.get("extenders", []):
        check(e, "extenders[]")
        for m in e.get("managedResources", []):
            check(m, "extenders[].managedResources[]")
    return problems


# ---- workloads, containers and their dry runs ----------------------------------------


def pod_specs(objects):
    for o in objects:
        if o["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield o, o["spec"]["template"]["spec"]


def vgpu_containers(objects, binaries=BINARIES):
    """(workload, pod spec, container, binary name) for every container running one of
    vgpu's binaries."""
    for w, spec in pod_specs(objects):
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            cmd = c.get("command") or []
            name = os.path.basename(cmd[0]) if cmd else ""
            if name in binaries:
                yield w, spec, c, name


class Tree:
    """The files a container sees under its volume mounts, materialized under a
    temporary root: ConfigMaps and Secrets by their keys, the rest as empty directories.
    paths(x) maps a path inside the container to the one here. A pod mounts ConfigMaps of
    its own namespace: vgpu's daemons run in vgpu-system (the Volcano overlay has a
    ConfigMap of the same name in kube-system too)."""

    def __init__(self, objects, spec, container, root, namespace="vgpu-system"):
        self.root = root
        self.mounts = []  # (mountPath, local dir)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for m in container.get("volumeMounts", []):
            v = volumes.get(m["name"], {})
            if "hostPath" in v:  # host paths are shared between containers, as on a node
                local = os.path.join(root, "host", v["hostPath"]["path"].strip("/"))
            else:
                local = os.path.join(root, "vol", m["name"])
            os.makedirs(local, exist_ok=True)
            data = {}
            if "configMap" in v:
                data = one([o for o in objects if o["metadata"].get("namespace") == namespace],
                           "ConfigMap", v["configMap"]["name"]).get("data", {})
            elif "secret" in v:
                data = {i["path"]: "" for i in v["secret"].get("items", [])} or \
                    {"tls.crt": "", "tls.key": "", "ca.crt": ""}
            for key, text in data.items():
                path = os.path.join(local, key)
                if "secret" in v and os.path.exists(path):
                    continue  # what a test put there (a certificate) stays
                with open(path, "w") as f:
                    f.write(text)
            self.mounts.append((m["mountPath"].rstrip("/") or "/", local))
        self.mounts.sort(key=lambda m: -len(m[0]))

    def local(self, path):
        for mp, local in self.mounts:
            if path == mp or path.startswith(mp + "/"):
                return local + path[len(mp):]
        return None

    def unlocal(self, text):
        for mp, local in self.mounts:
            text = text.replace(local, mp)
        return text


def container_args(c):
    return list(c.get("command", [])[1:]) + list(c.get("args", []))


def rewrite_args(args, tree):
    """Path values under a mount point at the materialized tree."""
    out = []
    for a in args:
        if a.startswith("--") and "=" in a:
            flag, value = a.split("=", 1)
            local = tree.local(value) if value.startswith("/") else None
            out.append("%s=%s" % (flag, local) if local else a)
        else:
            local = tree.local(a) if a.startswith("/") else None
            out.append(local or a)
    return out


def container_env(c, extra=None):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[e["name"]] = "node-1"
    env.update(extra or {})
    return env


def check_config(objects, spec, c, name, root):
    """Runs the container's command with --check-config. (problems, effective settings
    with container paths, tree)."""
    tree = Tree(objects, spec, c, root)
    args = rewrite_args(container_args(c), tree)
    r = subprocess.run([os.path.join(BUILD, "bin", name)] + args + ["--check-config"],
                       capture_output=True, text=True, env=container_env(c), timeout=30)
    if r.returncode != 0 or not r.stdout.rstrip().endswith("OK"):
        msg = tree.unlocal((r.stderr.strip().splitlines() or ["(no message)"])[0])
        return ["%s: container %s: `%s` refused (exit %d): %s"
                % (name, c["name"], " ".join(container_args(c)), r.returncode, msg)], {}, tree
    settings = {}
    for line in r.stdout.splitlines():
        sep = " = " if " = " in line else "="
        if sep in line:
            k, v = line.split(sep, 1)
            v = v.strip()
            if v.startswith('"') and v.endswith('"'):
                v = json.loads(v)
            settings[k.strip()] = tree.unlocal(v)
    return [], settings, tree


# What each binary reads, by its effective setting (--check-config's key): the file or
# directory the setting names ("path"), or the directory a file is made in ("parent").
# Defaults and meanings: docs/config.md, docs/scheduler.md, docs/monitor.md, docs/kube.md.
READS = {
    "vgpu-device-plugin": [
        ("kubeletDir", "path"), ("config", "path"), ("kubeconfig", "path"),
        ("vgpu.regionDir", "path"), ("vgpu.computeBoardDir", "path"),
        ("vgpu.libvgpuPath", "path"), ("vgpu.ldSoPreloadPath", "parent"),
        ("flags.plugin.containerDriverRoot", "path"), ("volcanoConfig", "path"),
    ],
    "vgpu-scheduler": [
        ("kubeconfig", "path"), ("tls-cert", "path"), ("tls-key", "path"),
        ("client-ca", "path"), ("token-file", "path"), ("webhook-client-ca", "path"),
    ],
    "vgpu-monitor": [
        ("region-dir", "path"), ("kubeconfig", "path"), ("metrics-file", "parent"),
    ],
}
# Settings the device plugin hands to kubelet as host paths: mounted from the same host
# path, or kubelet mounts something else into GPU containers.
SAME_ON_HOST = ("vgpu.regionDir", "vgpu.computeBoardDir", "vgpu.libvgpuPath",
                "vgpu.ldSoPreloadPath", "flags.mpsRoot")


def read_paths(name, settings):
    paths = []
    for key, how in READS[name]:
        v = settings.get(key)
        if not v or v in ("null", "(in-cluster)") or not v.startswith("/"):
            continue
        paths.append((key, os.path.dirname(v) if how == "parent" else v))
    if name == "vgpu-device-plugin" and settings.get("sharingStrategy") == "mps":
        paths += [("flags.mpsRoot", settings["flags.mpsRoot"]), ("MPS servers' /dev/shm", "/dev/shm")]
    return paths


def mount_problems(objects, spec, c, name, settings):
    problems = []
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = [(m["mountPath"].rstrip("/") or "/", m) for m in c.get("volumeMounts", [])]
    reads = read_paths(name, settings)
    for key, path in reads:
        under = [(mp, m) for mp, m in mounts if path == mp or path.startswith(mp + "/")]
        if not under:
            problems.append("%s reads %s (%s) but no volume is mounted there"
                            % (name, path, key))
            continue
        mp, m = max(under, key=lambda u: len(u[0]))
        host = volumes.get(m["name"], {}).get("hostPath", {}).get("path")
        if key in SAME_ON_HOST and (host or "").rstrip("/") != mp:
            problems.append("%s: %s %s is mounted from host path %s, not the same path: "
                            "kubelet is handed %s" % (name, key, path, host, path))
    for mp, m in mounts:
        if not any(p == mp or p.startswith(mp + "/") for _, p in reads):
            problems.append("%s: mount %s (volume %s) is a path %s never reads"
                            % (name, mp, m["name"], name))
    if name == "vgpu-monitor" and settings.get("proc-root") == "/proc" and \
            not spec.get("hostPID"):
        problems.append("vgpu-monitor reads the host's processes under /proc but the pod "
                        "has no hostPID")
    return problems


def check_workloads(objects):
    """Every vgpu container's dry run and mounts; also kube-scheduler's --config."""
    problems = []
    root = tempfile.mkdtemp(prefix="vgpu-deploy-")
    try:
        for i, (w, spec, c, name) in enumerate(vgpu_containers(objects)):
            p, settings, _ = check_config(objects, spec, c, name, os.path.join(root, str(i)))
            problems += p
            if not p:
                problems += mount_problems(objects, spec, c, name, settings)
        for w, spec in pod_specs(objects):
            for c in spec.get("containers", []):
                if c["name"] != "kube-scheduler":
                    continue
                tree = Tree(objects, spec, c, os.path.join(root, "ks"))
                for a in container_args(c):
                    if a.startswith("--config="):
                        local = tree.local(a.split("=", 1)[1])
                        if not local or not os.path.isfile(local):
                            problems.append("kube-scheduler: %s: no such file in its mounts" % a)
    finally:
        shutil.rmtree(root)
    return problems


def container(objects, workload, cname):
    for w, spec in pod_specs(objects):
        if w["metadata"]["name"] == workload:
            for c in spec.get("initContainers", []) + spec.get("containers", []):
                if c["name"] == cname:
                    return spec, c
    raise AssertionError("no container %s in %s" % (cname, workload))


# ---- flag names ------------------------------------------------------------------------

# Every daemon a manifest may run, the DRA plugin included (its overlay is checked in
# depth by dra_deploy_test.py).
DAEMONS = BINARIES + ("vgpu-dra-plugin",)
# The DRA overlay and its components, besides OVERLAYS and COMBINED.
DRA_RENDERINGS = ((), ("dra-node-policy",), ("dra-webhook",), ("dra-shared",))

_help_flags = {}


def help_flags(binary):
    """(canonical flags, {alias: canonical flag}) from `binary --help`: a flag's own line
    starts with "  --NAME" (or "  -X, --NAME"); an alias's line says "alias of --OTHER"
    after its flag column."""
    if binary not in _help_flags:
        r = subprocess.run([os.path.join(BUILD, "bin", binary), "--help"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, "%s --help exits %d" % (binary, r.returncode)
        canonical, aliases = set(), {}
        for line in r.stdout.splitlines():
            if not re.match(r"^  (?:-[A-Za-z], )?--[a-z]", line):
                continue
            # The flag column ends at the first gap of two spaces; it may name two flags
            # that go together ("--tls-cert FILE --tls-key FILE").
            column, _, rest = line.strip().partition("  ")
            a = re.search(r"alias of --([a-z][a-z0-9-]*)", rest)
            for flag in re.findall(r"--([a-z][a-z0-9-]*)", column):
                if a:
                    aliases[flag] = a.group(1)
                else:
                    canonical.add(flag)
        assert canonical, "%s --help lists no flags" % binary
        for alias, target in aliases.items():
            assert target in canonical, "%s --help: --%s is an alias of --%s, which it does " \
                "not list" % (binary, alias, target)
        _help_flags[binary] = (canonical, aliases)
    return _help_flags[binary]


def flag_name_problems(objects):
    """Every flag a vgpu daemon is started with, by its canonical name: one its --help
    lists as an alias, or does not list at all, is named."""
    problems = []
    for w, _spec, c, name in vgpu_containers(objects, DAEMONS):
        canonical, aliases = help_flags(name)
        for a in container_args(c):
            if not a.startswith("--"):
                continue
            flag = a[2:].split("=", 1)[0]
            if flag in aliases:
                problems.append("%s %s: container %s: --%s is an alias; the canonical name is "
                                "--%s" % (w["kind"], w["metadata"]["name"], c["name"], flag,
                                          aliases[flag]))
            elif flag not in canonical:
                problems.append("%s %s: container %s: --%s is not a flag `%s --help` lists"
                                % (w["kind"], w["metadata"]["name"], c["name"], flag, name))
    return problems


def render_overlay(overlay, components):
    """An overlay with components (None: this kustomize has no components)."""
    deploy = os.path.join(SOURCE, "deploy")
    if not components:
        return kustomize(os.path.join(deploy, "overlays", overlay))
    tmp = tempfile.mkdtemp(prefix="vgpu-deploy-")
    try:
        rel = lambda p: os.path.relpath(os.path.join(deploy, p), tmp)  # noqa: E731
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            f.write("resources:\n- %s\ncomponents:\n" % rel("overlays/" + overlay))
            for comp in components:
                f.write("- %s\n" % rel("components/" + comp))
        try:
            return kustomize(tmp)
        except AssertionError as e:
            if vg_skip.in_ci() or 'unknown field "components"' not in str(e):
                raise
            return None
    finally:
        shutil.rmtree(tmp)


# ---- processes -------------------------------------------------------------------------


def wait_for(pred, timeout=30.0, what="condition", interval=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError("timed out waiting for " + what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flag_value(args, flag):
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def replace_flag(args, flag, value):
    out = [a for a in args if not a.startswith(flag + "=")]
    return out + ["%s=%s" % (flag, value)]


class Box:
    """The test API server and whichever daemons are started, with the rendered
    manifests' command lines; paths under the containers' mounts live under one temporary
    root (host paths shared, as on one node)."""

    def __init__(self, objects, authz=None, nodes=("node-1",)):
        self.objects = objects
        self.kubelet_dirs, self.region_dirs = {}, {}
        self.dir = tempfile.mkdtemp(prefix="vgpu-box-")
        self.procs = {}
        self.logs = {}
        fixture = os.path.join(self.dir, "fixture.json")
        with open(fixture, "w") as f:
            json.dump({"nodes": [{"metadata": {"name": n, "labels": {
                "kubernetes.io/hostname": n}}} for n in nodes], "pods": []}, f)
        port_file = os.path.join(self.dir, "api.port")
        cmd = ["/usr/bin/python3", os.path.join(SOURCE, "tests", "kube_api_server.py"),
               "--port", "0", "--port-file", port_file, "--fixture", fixture,
               "--bookmark-interval", "1"]
        self.tokens = {}
        if authz is not None:
            path = os.path.join(self.dir, "authz.json")
            with open(path, "w") as f:
                json.dump(authz, f)
            cmd += ["--authz", path]
            self.tokens = {user: tok for tok, user in authz["tokens"].items()}
        self.spawn("api", cmd, {"PATH": os.environ.get("PATH", "")})
        self.api_port = int(wait_for(lambda: os.path.exists(port_file) and
                                     open(port_file).read().strip(), what="API port"))
        self.admin_token = self.tokens.get("admin", "admin")

    def kubeconfig(self, user):
        path = os.path.join(self.dir, "kubeconfig-%s" % user.replace(":", "_"))
        with open(path, "w") as f:
            f.write("current-context: c\n"
                    "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                    "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:%d'}}]\n"
                    "users: [{name: u, user: {token: %s}}]\n"
                    % (self.api_port, self.tokens.get(user, "anything")))
        return path

    def spawn(self, name, cmd, env):
        log = open(os.path.join(self.dir, name + ".log"), "w+")
        self.logs[name] = log
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self.procs[name]

    def log(self, name):
        f = self.logs[name]
        f.flush()
        f.seek(0)
        return f.read()

    def api(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=30)
        try:
            headers = {"Content-Type": "application/json",
                       "Authorization": "Bearer " + self.admin_token}
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()

    def forbidden(self):
        return self.api("GET", "/admin/stats")[1].get("forbidden", [])

    def tree(self, spec, c, node="node-1"):
        """The container's files on this node: each node has its own host paths."""
        return Tree(self.objects, spec, c, os.path.join(self.dir, node))

    @staticmethod
    def proc_name(what, node):
        return what if node == "node-1" else "%s@%s" % (what, node)

    def start_device_plugin(self, user="system:serviceaccount:vgpu-system:vgpu-device-plugin",
                            env=None, kubeconfig=True, node="node-1"):
        spec, c = container(self.objects, "vgpu-device-plugin", "vgpu-device-plugin")
        tree = self.tree(spec, c, node)
        _, settings, _ = check_config(self.objects, spec, c, "vgpu-device-plugin",
                                      os.path.join(self.dir, "check-dp"))
        args = rewrite_args(container_args(c), tree)
        # The settings whose defaults lie under a mount, pointed at the tree (what the
        # host paths are on this "node").
        for key, flag in (("vgpu.regionDir", "--region-dir"),
                          ("vgpu.computeBoardDir", "--compute-board-dir"),
                          ("vgpu.libvgpuPath", "--libvgpu-path"),
                          ("vgpu.ldSoPreloadPath", "--ld-so-preload-path"),
                          ("flags.plugin.containerDriverRoot", "--container-driver-root"),
                          ("kubeletDir", "--kubelet-dir")):
            local = tree.local(settings[key])
            assert local, "%s %s is under no mount" % (key, settings[key])
            args = replace_flag(args, flag, local)
        # The init container's job: libvgpu.so where vgpu.libvgpuPath says.
        lib = tree.local(settings["vgpu.libvgpuPath"])
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        shutil.copy(os.path.join(BUILD, "lib", "libvgpu.so"), lib)
        if kubeconfig:
            args.append("--kubeconfig=" + self.kubeconfig(user))
        extra = {"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
                 "FAKEGPU_DEVICES": FAKE_DEVICES,
                 "FAKEGPU_STATE_DIR": os.path.join(self.dir, node, "fakegpu"),
                 "VGPU_DP_HEALTH_INTERVAL_MS": "200", "NODE_NAME": node}
        extra.update(env or {})
        os.makedirs(extra["FAKEGPU_STATE_DIR"], exist_ok=True)
        self.kubelet_dir = self.kubelet_dirs[node] = tree.local(settings["kubeletDir"])
        self.region_dir = self.region_dirs[node] = tree.local(settings["vgpu.regionDir"])
        self.plugin_env = getattr(self, "plugin_env", {})
        self.plugin_env[node] = container_env(c, extra)
        return self.spawn(self.proc_name("device-plugin", node),
                          [os.path.join(BUILD, "bin", "vgpu-device-plugin")] + args,
                          container_env(c, extra))

    def start_scheduler(self, user="system:serviceaccount:vgpu-system:vgpu-scheduler"):
        spec, c = container(self.objects, "vgpu-scheduler", "vgpu-scheduler")
        tree = self.tree(spec, c)
        args = container_args(c)
        self.listen = flag_value(args, "--listen")
        self.webhook_listen = flag_value(args, "--webhook-listen")
        cert, key = (tree.local(flag_value(args, f)) for f in ("--tls-cert", "--tls-key"))
        if not os.path.getsize(cert):  # a restart keeps the Secret's certificate
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-days", "1", "-subj", "/CN=vgpu-scheduler-webhook.vgpu-system.svc",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
        self.cert = cert
        args = rewrite_args(args, tree)
        port_file = os.path.join(self.dir, "sched.port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.webhook_port = free_port()
        args = replace_flag(args, "--listen", "127.0.0.1:0")
        if self.webhook_listen:
            args = replace_flag(args, "--webhook-listen", "127.0.0.1:%d" % self.webhook_port)
        args += ["--port-file=" + port_file, "--kubeconfig=" + self.kubeconfig(user)]
        proc = self.spawn("scheduler", [os.path.join(BUILD, "bin", "vgpu-scheduler")] + args,
                          container_env(c))
        self.ext_port = int(wait_for(lambda: proc.poll() is None and os.path.exists(port_file)
                                     and open(port_file).read().strip() or proc.poll() is not None,
                                     what="scheduler port"))
        return proc

    def start_monitor(self, user="system:serviceaccount:vgpu-system:vgpu-monitor", env=None,
                      kubeconfig=True, node="node-1", args_extra=()):
        spec, c = container(self.objects, "vgpu-monitor", "vgpu-monitor")
        tree = self.tree(spec, c, node)
        args = rewrite_args(container_args(c), tree)
        _, settings, _ = check_config(self.objects, spec, c, "vgpu-monitor",
                                      os.path.join(self.dir, "check-mon"))
        args = replace_flag(args, "--region-dir", tree.local(settings["region-dir"]))
        args.append("--interval-ms=100")
        # Several nodes share this machine: each monitor's metrics on a port of its own.
        args = replace_flag(args, "--listen", "127.0.0.1:0")
        args += list(args_extra)
        if kubeconfig:
            args.append("--kubeconfig=" + self.kubeconfig(user))
        extra = {"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
                 "FAKEGPU_DEVICES": FAKE_DEVICES,
                 "FAKEGPU_STATE_DIR": os.path.join(self.dir, node, "fakegpu"),
                 "NODE_NAME": node}
        extra.update(env or {})
        return self.spawn(self.proc_name("monitor", node),
                          [os.path.join(BUILD, "bin", "vgpu-monitor")] + args,
                          container_env(c, extra))

    def ext(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.ext_port, timeout=30)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, data
        finally:
            conn.close()

    def stop_one(self, name):
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
        return p.returncode

    def stop(self):
        codes = {}
        for name, p in reversed(list(self.procs.items())):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            codes[name] = p.returncode
        for f in self.logs.values():
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return codes


# ---- RBAC ------------------------------------------------------------------------------


def authz_from(objects):
    """The --authz file of tests/kube_api_server.py from the rendered roles and bindings:
    one token per service account, its rules from the Roles and ClusterRoles bound to
    it. Kubernetes' own roles (system:kube-scheduler, ...) are not in the manifests and
    grant nothing here, so vgpu's daemons run on vgpu's roles alone."""
    roles = {("ClusterRole", o["metadata"]["name"]): o for o in find(objects, "ClusterRole")}
    roles.update({("Role", o["metadata"]["namespace"], o["metadata"]["name"]): o
                  for o in find(objects, "Role")})
    rules, tokens = {}, {"admin-token": "admin"}
    rules["admin"] = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                       "namespace": None}]
    for b in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        role = roles.get(("ClusterRole", ref["name"]) if ref["kind"] == "ClusterRole"
                         else ("Role", ns, ref["name"]))
        for s in b.get("subjects", []):
            if s["kind"] != "ServiceAccount":
                continue
            user = "system:serviceaccount:%s:%s" % (s["namespace"], s["name"])
            tokens.setdefault("token-" + s["name"], user)
            for r in (role or {}).get("rules", []):
                rules.setdefault(user, []).append(dict(r, namespace=ns))
    return {"tokens": tokens, "rules": rules}


def without_verb(authz, user, resource, verb):
    out = copy.deepcopy(authz)
    found = False
    for r in out["rules"].get(user, []):
        if resource in r.get("resources", []) and verb in r.get("verbs", []):
            r["verbs"] = [v for v in r["verbs"] if v != verb]
            found = True
    assert found, "%s has no %s on %s to remove" % (user, verb, resource)
    return out


def scenario(objects, authz):
    """A GPU pod through the rendered deployment under authz: the device plugin publishes
    the node's inventory and serves kubelet, the scheduler filters and binds the pod,
    kubelet's Allocate gets its limits, the monitor watches the node's pods. Returns the
    problems: a step that failed, and every request the API server refused."""
    import deviceplugin_kubelet as dk  # python3-grpcio; imported late (it may skip)
    if not dk.M:
        dk.load_messages(os.path.join(BUILD, "gen", "grpc", "kubelet", "api.desc"))
    box = Box(objects, authz)
    kubelet = None
    problems = []

    def refused():
        f = box.forbidden()
        if f:
            raise AssertionError("refused by the API server (403): " + "; ".join(f))

    def until(pred, what, timeout=30):
        def step():
            refused()
            return pred()
        return wait_for(step, timeout=timeout, what=what)

    try:
        kdir = os.path.join(box.dir, "node-1", "host/var/lib/kubelet/device-plugins")
        os.makedirs(kdir, exist_ok=True)
        kubelet = dk.FakeKubelet(kdir)
        box.start_device_plugin()
        until(lambda: kubelet.latest("nvidia.com/gpu"), "the device plugin's devices")
        inv = until(lambda: box.api("GET", "/api/v1/nodes/node-1")[1]["metadata"]
                    .get("annotations", {}).get("vgpu.io/gpus"), "the node's inventory")
        uuids = [g["uuid"] for g in json.loads(inv)["gpus"]]
        box.start_scheduler()
        until(lambda: box.ext("GET", "/readyz")[0] == 200, "the scheduler's watches")
        box.start_monitor()
        until(lambda: "watching" in box.log("monitor"), "the monitor's start")
        pod = {"metadata": {"name": "cuda", "namespace": "default"},
               "spec": {"schedulerName": "vgpu-scheduler", "containers": [{
                   "name": "main", "image": "cuda",
                   "resources": {"limits": {"nvidia.com/gpu": "1",
                                            "nvidia.com/gpumem": "1024",
                                            "nvidia.com/gpucores": "30"}}}]},
               "status": {"phase": "Pending"}}
        status, pod = box.api("POST", "/api/v1/namespaces/default/pods", pod)
        assert status == 201, (status, pod)

        def filtered():
            s, body = box.ext("POST", "/filter", {"Pod": pod, "Nodes": None,
                                                  "NodeNames": ["node-1"]})
            return s == 200 and body.get("NodeNames") == ["node-1"]
        until(filtered, "the filter to place the pod")
        s, body = box.ext("POST", "/bind", {"PodName": "cuda", "PodNamespace": "default",
                                            "PodUID": pod["metadata"]["uid"], "Node": "node-1"})
        refused()
        assert s == 200 and not body.get("Error"), "bind: %s %s" % (s, body)
        bound = box.api("GET", "/api/v1/namespaces/default/pods/cuda")[1]
        decision = json.loads(bound["metadata"]["annotations"]["vgpu.io/decision"])
        gpu = decision["containers"][0]["gpus"][0]["uuid"]
        assert gpu in uuids, (gpu, uuids)
        ids = [d for d, _ in kubelet.latest("nvidia.com/gpu")]
        pref = until(lambda: (lambda p: p if p and p[0].startswith(gpu) else None)(
            kubelet.preferred("nvidia.com/gpu", ids, 1)), "the decision at the device plugin")
        resp = kubelet.allocate("nvidia.com/gpu", pref).container_responses[0]
        env = dict(resp.envs)
        assert env.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1024m", env
        assert env.get("CUDA_DEVICE_SM_LIMIT") == "30", env
        until(lambda: os.path.exists(os.path.join(box.region_dir, "%s_main" % pod["metadata"]["uid"],
                                                  "etc", "limits")), "the container's limits file")
        # The monitor has listed and is watching the node's pods.
        time.sleep(0.5)
        refused()
        for name in ("device-plugin", "scheduler", "monitor"):
            if box.procs[name].poll() is not None:
                problems.append("%s exited (%s): %s" % (name, box.procs[name].returncode,
                                                        box.log(name)[-2000:]))
    except AssertionError as e:
        problems.append(str(e))
    except Exception as e:  # grpc errors and the like: the step that failed, with logs
        problems.append("%s: %s" % (type(e).__name__, e))
    finally:
        if problems and os.environ.get("DEPLOY_VERBOSE"):
            for name in box.logs:
                print("---- %s\n%s" % (name, box.log(name)[-3000:]))
        if kubelet:
            kubelet.stop()
        logs = {name: box.log(name) for name in box.logs}
        codes = box.stop()
        # Each daemon stops cleanly on SIGTERM (under the sanitizers: nothing leaked).
        problems += ["%s exited %s on SIGTERM: %s" % (name, code, logs[name][-2000:])
                     for name, code in codes.items() if name != "api" and code != 0]
    return problems


# ---- the tests ---------------------------------------------------------------------------


class Render(unittest.TestCase):
    def test_every_overlay_renders_to_valid_objects(self):
        for name, objects in renderings().items():
            with self.subTest(rendering=name):
                self.assertTrue(objects)
                problems = [p for o in objects for p in validate(o)]
                self.assertEqual(problems, [])
                kinds = {o["kind"] for o in objects}
                self.assertTrue({"Namespace", "DaemonSet", "ConfigMap", "ServiceAccount",
                                 "ClusterRole", "ClusterRoleBinding"} <= kinds, kinds)

    def test_modes(self):
        r = renderings()
        for name, objects in r.items():
            cm = one(objects, "ConfigMap", "vgpu-device-plugin-config")
            cfg = yaml.safe_load(cm["data"]["config.yaml"])
            has_scheduler = bool(find(objects, "Deployment", "vgpu-scheduler"))
            with self.subTest(rendering=name):
                if name.startswith("vgpu"):
                    self.assertIn("vgpu", cfg)
                    self.assertTrue(has_scheduler)
                    self.assertTrue(find(objects, "DaemonSet", "vgpu-monitor"))
                    self.assertTrue(find(objects, "MutatingWebhookConfiguration"))
                else:
                    self.assertFalse(has_scheduler)
                if name == "time-slicing":
                    self.assertEqual(cfg["sharing"]["timeSlicing"]["resources"][0]["replicas"], 4)
                if name == "mps":
                    self.assertEqual(cfg["sharing"]["mps"]["resources"][0]["replicas"], 10)
                if name == "mig":
                    self.assertEqual(cfg["flags"]["migStrategy"], "mixed")

    def test_scheduler_configuration(self):
        for name, objects in renderings().items():
            if not find(objects, "Deployment", "vgpu-scheduler"):
                continue
            with self.subTest(rendering=name):
                cfg = scheduler_config(objects)
                self.assertEqual(validate_scheduler_config(cfg), [])
                ext = cfg["extenders"][0]
                self.assertTrue(ext["nodeCacheCapable"])
                self.assertEqual(ext["bindVerb"], "bind")
                self.assertEqual({m["name"] for m in ext["managedResources"]
                                  if m["ignoredByScheduler"]},
                                 {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
                                  "nvidia.com/gpumem-percentage"})
                self.assertEqual([p["schedulerName"] for p in cfg["profiles"]], ["vgpu-scheduler"])

    def test_unknown_fields_are_caught(self):
        objects = copy.deepcopy(rendering("vgpu"))
        ds = one(objects, "DaemonSet", "vgpu-device-plugin")
        ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
        ds["spec"]["template"]["spec"]["hostPid"] = True
        self.assertEqual(sorted(validate(ds)), [
            "DaemonSet/vgpu-device-plugin: spec.template.spec.containers[0].volumeMount: "
            "no such field",
            "DaemonSet/vgpu-device-plugin: spec.template.spec.hostPid: no such field"])
        mwc = one(objects, "MutatingWebhookConfiguration", "vgpu-scheduler")
        del mwc["webhooks"][0]["sideEffects"]
        self.assertTrue(any("side_effects" in p for p in validate(mwc)), validate(mwc))
        cfg = scheduler_config(objects)
        cfg["extenders"][0]["nodeCacheCapabel"] = True
        cfg["extenders"][0]["managedResources"][0]["ignoredByScheduller"] = True
        self.assertEqual(validate_scheduler_config(cfg), [
            "KubeSchedulerConfiguration: extenders[].nodeCacheCapabel: no such field",
            "KubeSchedulerConfiguration: extenders[].managedResources[].ignoredByScheduller: "
            "no such field"])


class Flags(unittest.TestCase):
    def test_every_container_command_is_accepted(self):
        seen = set()
        for name, objects in renderings().items():
            with self.subTest(rendering=name):
                problems = check_workloads(objects)
                if name.endswith("monitoring+cert-manager") and problems == [MONITOR_LISTEN]:
                    # vgpu-monitor of this tree serves no metrics port yet (see below).
                    problems = []
                self.assertEqual(problems, [])
                seen |= {n for _, _, _, n in vgpu_containers(objects)}
        self.assertEqual(seen, set(BINARIES))

    def test_the_watchdog_kills_by_default(self):
        """Every rendering's vgpu-monitor runs the kill policy with the registration check
        and quarantine on (docs/monitor.md, "Policies"), with what they need: CAP_KILL to
        signal, CAP_SYS_PTRACE to read other users' /proc/<pid>/maps."""
        for name, objects in renderings().items():
            if not find(objects, "DaemonSet", "vgpu-monitor"):
                continue
            with self.subTest(rendering=name):
                spec, c = container(objects, "vgpu-monitor", "vgpu-monitor")
                with tempfile.TemporaryDirectory(prefix="vgpu-deploy-") as tmp:
                    problems, settings, _ = check_config(objects, spec, c, "vgpu-monitor", tmp)
                if problems == [MONITOR_LISTEN]:
                    continue
                self.assertEqual(problems, [])
                self.assertEqual(settings.get("policy"), "kill")
                self.assertEqual(settings.get("registration-check"), "on")
                self.assertNotEqual(settings.get("quarantine-after"), "0")
                caps = c["securityContext"]["capabilities"]
                self.assertEqual(sorted(caps["add"]), ["KILL", "SYS_PTRACE"])
                self.assertEqual(caps["drop"], ["ALL"])

    def test_a_flag_that_does_not_exist_is_named(self):
        for workload, cname, binary in (("vgpu-device-plugin", "vgpu-device-plugin",
                                         "vgpu-device-plugin"),
                                        ("vgpu-scheduler", "vgpu-scheduler", "vgpu-scheduler"),
                                        ("vgpu-monitor", "vgpu-monitor", "vgpu-monitor")):
            with self.subTest(binary=binary):
                objects = copy.deepcopy(rendering("vgpu"))
                _, c = container(objects, workload, cname)
                c["args"].append("--regoin-dir=/usr/local/vgpu/containers")
                problems = check_workloads(objects)
                self.assertEqual(len(problems), 1, problems)
                self.assertIn("%s: container %s:" % (binary, cname), problems[0])
                self.assertIn("--regoin-dir", problems[0].split("refused")[1])

    def test_a_bad_value_is_named(self):
        objects = copy.deepcopy(rendering("vgpu"))
        _, c = container(objects, "vgpu-scheduler", "vgpu-scheduler")
        c["args"] = [a for a in c["args"] if not a.startswith("--tls-key")]
        problems = check_workloads(objects)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("--webhook-listen needs --tls-cert and --tls-key", problems[0])
        # The extender moved off loopback without client authentication: refused, as the
        # daemon would refuse to start.
        objects = copy.deepcopy(rendering("vgpu"))
        _, c = container(objects, "vgpu-scheduler", "vgpu-scheduler")
        c["args"] = ["--listen=0.0.0.0:8888" if a.startswith("--listen=") else a
                     for a in c["args"]]
        problems = check_workloads(objects)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("--listen 0.0.0.0:8888 is not loopback", problems[0])
        objects = copy.deepcopy(rendering("mps"))
        cm = one(objects, "ConfigMap", "vgpu-device-plugin-config")
        cm["data"]["config.yaml"] = cm["data"]["config.yaml"].replace("replicas: 10", "replicas: 1")
        problems = check_workloads(objects)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("sharing.mps.resources[0].replicas", problems[0])


# The monitoring component starts vgpu-monitor with --listen; until the monitor serves
# metrics (docs/install.md), its dry run refuses exactly that flag, and nothing else.
MONITOR_LISTEN = None


class Names(unittest.TestCase):
    """One name per thing: every manifest starts every daemon with its flags' canonical
    names (those its --help lists; an alias is listed as "alias of --NAME")."""

    def all_renderings(self):
        out = dict(renderings())
        for comps in DRA_RENDERINGS:
            objects = render_overlay("dra", comps)
            if objects is not None:
                out["+".join(("dra",) + comps)] = objects
        return out

    def test_manifests_use_canonical_flag_names(self):
        seen = set()
        for name, objects in self.all_renderings().items():
            with self.subTest(rendering=name):
                self.assertEqual(flag_name_problems(objects), [])
                seen |= {n for _, _, _, n in vgpu_containers(objects, DAEMONS)}
        self.assertEqual(seen, set(DAEMONS))

    def test_an_alias_is_named(self):
        """The check can fail: the monitor started with --containers-dir (the alias of
        --region-dir) and the device plugin with a flag its --help lacks are named."""
        self.assertEqual(help_flags("vgpu-monitor")[1].get("containers-dir"), "region-dir")
        objects = copy.deepcopy(rendering("vgpu"))
        _, c = container(objects, "vgpu-monitor", "vgpu-monitor")
        c["args"] = [a.replace("--region-dir=", "--containers-dir=") for a in c["args"]]
        _, c = container(objects, "vgpu-device-plugin", "vgpu-device-plugin")
        c["args"] = list(c.get("args", [])) + ["--no-such-flag=1"]
        self.assertEqual(sorted(flag_name_problems(objects)), [
            "DaemonSet vgpu-device-plugin: container vgpu-device-plugin: --no-such-flag is not "
            "a flag `vgpu-device-plugin --help` lists",
            "DaemonSet vgpu-monitor: container vgpu-monitor: --containers-dir is an alias; the "
            "canonical name is --region-dir"])

    def test_every_daemon_has_check_config(self):
        for binary in DAEMONS:
            with self.subTest(binary=binary):
                self.assertIn("check-config", help_flags(binary)[0])


class Mounts(unittest.TestCase):
    def test_a_missing_mount_is_named(self):
        cases = [("vgpu-device-plugin", "vgpu-device-plugin", "vgpu-host",
                  ["vgpu-device-plugin reads /usr/local/vgpu/containers (vgpu.regionDir) but "
                   "no volume is mounted there"]),
                 ("vgpu-device-plugin", "vgpu-device-plugin", "device-plugins",
                  ["vgpu-device-plugin reads /var/lib/kubelet/device-plugins (kubeletDir) but "
                   "no volume is mounted there"]),
                 ("vgpu-monitor", "vgpu-monitor", "containers",
                  ["vgpu-monitor reads /usr/local/vgpu/containers (region-dir) but no "
                   "volume is mounted there"]),
                 ("vgpu-scheduler", "vgpu-scheduler", "tls",
                  ["vgpu-scheduler reads /etc/vgpu/tls/tls.crt (tls-cert) but no volume is "
                   "mounted there"])]
        for workload, cname, volume, expect in cases:
            with self.subTest(volume=volume):
                objects = copy.deepcopy(rendering("vgpu"))
                _, c = container(objects, workload, cname)
                c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != volume]
                problems = check_workloads(objects)
                for e in expect:
                    self.assertIn(e, problems)

    def test_host_paths_and_stray_mounts(self):
        objects = copy.deepcopy(rendering("vgpu"))
        spec, c = container(objects, "vgpu-device-plugin", "vgpu-device-plugin")
        for v in spec["volumes"]:
            if v["name"] == "vgpu-host":
                v["hostPath"]["path"] = "/opt/vgpu"
        c["volumeMounts"].append({"name": "vgpu-host", "mountPath": "/srv/unused"})
        problems = check_workloads(objects)
        self.assertIn("vgpu-device-plugin: vgpu.regionDir /usr/local/vgpu/containers is "
                      "mounted from host path /opt/vgpu, not the same path: kubelet is "
                      "handed /usr/local/vgpu/containers", problems)
        self.assertIn("vgpu-device-plugin: mount /srv/unused (volume vgpu-host) is a path "
                      "vgpu-device-plugin never reads", problems)
        mon, _ = container(objects, "vgpu-monitor", "vgpu-monitor")
        del mon["hostPID"]
        self.assertIn("vgpu-monitor reads the host's processes under /proc but the pod has "
                      "no hostPID", check_workloads(objects))

    def test_libvgpu_lands_where_allocate_mounts_it(self):
        """The init containers install the image's libvgpu.so (/usr/lib/vgpu/libvgpu.so)
        at the plugin's vgpu.libvgpuPath, through a temporary name on the same volume."""
        for name, objects in renderings().items():
            with self.subTest(rendering=name):
                spec, c = container(objects, "vgpu-device-plugin", "vgpu-device-plugin")
                with tempfile.TemporaryDirectory(prefix="vgpu-deploy-") as tmp:
                    _, settings, _ = check_config(objects, spec, c, "vgpu-device-plugin", tmp)
                init = {i["name"]: i["command"] for i in spec["initContainers"]}
                install, mv = init["install-libvgpu"], init["rename-libvgpu"]
                self.assertEqual(install[:3], ["/usr/bin/install", "-m", "0755"])
                self.assertEqual(install[3], "/usr/lib/vgpu/libvgpu.so")
                self.assertEqual(mv[:2], ["/bin/mv", "-f"])
                self.assertEqual(mv[2], install[4])
                self.assertEqual(mv[3], settings["vgpu.libvgpuPath"])
                self.assertEqual(os.path.dirname(mv[2]), os.path.dirname(mv[3]))

    def test_read_paths_are_the_documented_defaults(self):
        """The paths of READS, as each binary reports its defaults, are the defaults its
        documentation gives (docs/config.md, docs/monitor.md): the manifests mount what
        the docs say and the code does."""
        docs = {"vgpu-device-plugin": ("docs/config.md", {
                    "vgpu.regionDir": "`vgpu.regionDir`", "vgpu.computeBoardDir":
                    "`vgpu.computeBoardDir`", "vgpu.libvgpuPath": "`vgpu.libvgpuPath`",
                    "vgpu.ldSoPreloadPath": "`vgpu.ldSoPreloadPath`", "flags.mpsRoot":
                    "`flags.mpsRoot`", "flags.plugin.containerDriverRoot":
                    "`flags.plugin.containerDriverRoot`", "kubeletDir": "`--kubelet-dir`"}),
                "vgpu-monitor": ("docs/monitor.md", {"region-dir": "`--region-dir DIR`",
                                                "proc-root": "`--proc-root DIR`"})}
        for binary, (doc, keys) in docs.items():
            r = subprocess.run([os.path.join(BUILD, "bin", binary), "--check-config"],
                               capture_output=True, text=True, env={"NODE_NAME": "n"})
            self.assertEqual(r.returncode, 0, r.stderr)
            settings = {}
            for line in r.stdout.splitlines():
                sep = " = " if " = " in line else "="
                if sep in line:
                    k, v = line.split(sep, 1)
                    settings[k.strip()] = v.strip().strip('"')
            with open(os.path.join(SOURCE, doc)) as f:
                rows = [line for line in f if line.startswith("| `")]
            for key, cell in keys.items():
                with self.subTest(binary=binary, key=key):
                    row = [line for line in rows if line.startswith("| " + cell + " |")]
                    self.assertEqual(len(row), 1, cell)
                    self.assertIn("`%s`" % settings[key], row[0])

    def test_mps_mounts(self):
        objects = copy.deepcopy(rendering("mps"))
        self.assertEqual(check_workloads(objects), [])
        _, c = container(objects, "vgpu-device-plugin", "vgpu-device-plugin")
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "mps-shm"]
        self.assertIn("vgpu-device-plugin reads /dev/shm (MPS servers' /dev/shm) but no volume "
                      "is mounted there", check_workloads(objects))


class Scheduler(unittest.TestCase):
    def test_extender_verbs_and_webhook_are_served(self):
        objects = rendering("vgpu")
        cfg = scheduler_config(objects)
        ext = cfg["extenders"][0]
        box = Box(objects)
        try:
            box.start_scheduler()
            wait_for(lambda: box.ext("GET", "/readyz")[0] == 200, what="scheduler ready")
            # The urlPrefix is the address vgpu-scheduler listens on, in the same pod.
            self.assertEqual(ext["urlPrefix"], "http://" + box.listen)
            verbs = [ext[k] for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")
                     if ext.get(k)]
            self.assertEqual(sorted(verbs), ["bind", "filter", "prioritize"])
            for verb in verbs:
                status, body = box.ext("POST", "/" + verb, {})
                self.assertNotEqual(status, 404, (verb, body))
            self.assertEqual(box.ext("POST", "/no-such-verb", {})[0], 404)
            # The webhook: Service port -> targetPort = containerPort = --webhook-listen's
            # port; the configuration's path is served there.
            mwc = one(objects, "MutatingWebhookConfiguration", "vgpu-scheduler")
            svc_ref = mwc["webhooks"][0]["clientConfig"]["service"]
            svc = one(objects, "Service", svc_ref["name"])
            self.assertEqual(svc["metadata"]["namespace"], svc_ref["namespace"])
            port = [p for p in svc["spec"]["ports"] if p["port"] == svc_ref.get("port", 443)]
            self.assertEqual(len(port), 1, svc["spec"]["ports"])
            spec, c = container(objects, "vgpu-scheduler", "vgpu-scheduler")
            listen_port = int(box.webhook_listen.rsplit(":", 1)[1])
            self.assertEqual(port[0]["targetPort"], listen_port)
            self.assertIn(listen_port, [p["containerPort"] for p in c["ports"]])
            deploy = one(objects, "Deployment", "vgpu-scheduler")
            labels = deploy["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(svc["spec"]["selector"].items() <= labels.items())
            ctx = ssl.create_default_context(cafile=box.cert)
            ctx.check_hostname = False
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "1", "operation": "CREATE", "object": {
                          "metadata": {"name": "p", "namespace": "default"},
                          "spec": {"containers": [{"name": "c", "resources": {"limits": {
                              "nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]}}}}
            for path, want in ((svc_ref["path"], 200), ("/no-such-path", 404)):
                conn = http.client.HTTPSConnection("127.0.0.1", box.webhook_port, context=ctx,
                                                   timeout=30)
                conn.request("POST", path, json.dumps(review),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                body = r.read()
                conn.close()
                self.assertEqual(r.status, want, (path, body))
                if want == 200:
                    self.assertTrue(json.loads(body)["response"]["allowed"], body)
            # Probes name paths and ports that answer.
            for probe in ("readinessProbe", "livenessProbe"):
                get = c[probe]["httpGet"]
                self.assertEqual(get["port"], "webhook")
                conn = http.client.HTTPSConnection("127.0.0.1", box.webhook_port, context=ctx,
                                                   timeout=30)
                conn.request("GET", get["path"])
                self.assertEqual(conn.getresponse().status, 200, probe)
                conn.close()
        finally:
            box.stop()

    def test_webhook_namespaces_and_failure_policy(self):
        objects = rendering("vgpu")
        wh = one(objects, "MutatingWebhookConfiguration", "vgpu-scheduler")["webhooks"][0]
        self.assertEqual(wh["failurePolicy"], "Fail")
        ns = one(objects, "Deployment", "vgpu-scheduler")["metadata"]["namespace"]
        skipped = wh["namespaceSelector"]["matchExpressions"][0]
        self.assertEqual(skipped["operator"], "NotIn")
        # The scheduler's own namespace is never sent to it: it can always start.
        self.assertIn(ns, skipped["values"])
        self.assertIn("kube-system", skipped["values"])


class Rbac(unittest.TestCase):
    def test_rendered_roles_suffice(self):
        objects = rendering("vgpu")
        self.assertEqual(scenario(objects, authz_from(objects)), [])

    def test_roles_are_exactly_what_is_called(self):
        objects = rendering("vgpu")
        got = {o["metadata"]["name"]: sorted((tuple(r.get("apiGroups", [])),
                                              tuple(r["resources"]), tuple(r["verbs"]))
                                             for r in o["rules"])
               for o in find(objects, "ClusterRole")}
        flat = {name: sorted("%s:%s" % (res, v) for g, rs, vs in rules for res in rs for v in vs)
                for name, rules in got.items()}
        # A live resize reads and patches the pod and lists the namespace's quotas.
        self.assertEqual(flat["vgpu-scheduler"], ["nodes:list", "nodes:watch", "pods/binding:create",
                                                  "pods:get", "pods:list", "pods:patch",
                                                  "pods:watch", "resourcequotas:list"])
        self.assertEqual(flat["vgpu-device-plugin"], ["nodes:patch", "pods:list", "pods:watch"])
        self.assertEqual(flat["vgpu-monitor"], ["events:create", "pods/status:patch", "pods:list",
                                                "pods:watch"])

    def test_a_missing_verb_fails(self):
        objects = rendering("vgpu")
        authz = authz_from(objects)
        sa = "system:serviceaccount:vgpu-system:"
        for user, resource, verb, needle in (
                (sa + "vgpu-scheduler", "pods/binding", "create",
                 sa + "vgpu-scheduler create pods/binding default/cuda"),
                (sa + "vgpu-device-plugin", "nodes", "patch",
                 sa + "vgpu-device-plugin patch nodes /node-1"),
                (sa + "vgpu-monitor", "pods", "watch", sa + "vgpu-monitor watch pods /")):
            with self.subTest(user=user, verb=verb):
                problems = scenario(objects, without_verb(authz, user, resource, verb))
                self.assertTrue(any(needle in p for p in problems), problems)

    def test_enforcement(self):
        """The API server's RBAC mode itself: 401 without a token, 403 with
        kube-apiserver's Status outside the rules, namespaces and resourceNames kept."""
        authz = {"tokens": {"t1": "u1", "admin-token": "admin"},
                 "rules": {"u1": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"],
                                   "namespace": "a"},
                                  {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"],
                                   "resourceNames": ["node-1"], "namespace": None}],
                           "admin": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                      "namespace": None}]}}
        box = Box([], authz)
        try:
            def req(method, path, token):
                conn = http.client.HTTPConnection("127.0.0.1", box.api_port, timeout=10)
                conn.request(method, path, None,
                             {"Authorization": "Bearer " + token} if token else {})
                r = conn.getresponse()
                body = json.loads(r.read())
                conn.close()
                return r.status, body
            self.assertEqual(req("GET", "/api/v1/pods", None)[0], 401)
            self.assertEqual(req("GET", "/api/v1/pods", "wrong")[0], 401)
            self.assertEqual(req("GET", "/api/v1/nodes/node-1", "t1")[0], 200)
            status, body = req("GET", "/api/v1/nodes", "t1")
            self.assertEqual(status, 403)
            self.assertEqual((body["kind"], body["reason"], body["code"]), ("Status", "Forbidden", 403))
            self.assertEqual(body["message"], 'nodes is forbidden: User "u1" cannot list resource '
                                              '"nodes" in API group "" at the cluster scope')
            self.assertEqual(req("GET", "/api/v1/namespaces/a/pods/x", "t1")[0], 404)
            status, body = req("GET", "/api/v1/namespaces/b/pods/x", "t1")
            self.assertEqual(body["message"], 'pods "x" is forbidden: User "u1" cannot get resource '
                                              '"pods" in API group "" in the namespace "b"')
            self.assertEqual(req("GET", "/api/v1/pods?watch=1", "t1")[0], 403)
            self.assertEqual(len(box.forbidden()), 3)
        finally:
            box.stop()


class Volcano(unittest.TestCase):
    """deploy/overlays/volcano (docs/volcano.md): the node side beside Volcano's scheduler."""

    def test_objects(self):
        objects = rendering("volcano")
        # Volcano's ConfigMap where its scheduler reads it, and the same file beside the
        # device plugin (a pod mounts ConfigMaps of its own namespace only).
        cms = {(o["metadata"]["namespace"], o["metadata"]["name"]): o
               for o in find(objects, "ConfigMap")}
        cms = {"kube-system": cms[("kube-system", "volcano-vgpu-device-config")],
               "vgpu-system": cms[("vgpu-system", "vgpu-volcano-device-config")]}
        self.assertEqual(cms["kube-system"]["data"], cms["vgpu-system"]["data"])
        conf = yaml.safe_load(cms["kube-system"]["data"]["device-config.yaml"])["nvidia"]
        self.assertEqual([conf[k] for k in ("resourceCountName", "resourceMemoryName",
                                            "resourceCoreName")],
                         ["volcano.sh/vgpu-number", "volcano.sh/vgpu-memory",
                          "volcano.sh/vgpu-cores"])
        spec, c = container(objects, "vgpu-device-plugin", "vgpu-device-plugin")
        args = container_args(c)
        self.assertEqual(flag_value(args, "--scheduler-protocol"), "volcano")
        path = flag_value(args, "--volcano-config")
        mount = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        self.assertEqual(len(mount), 1, c["volumeMounts"])
        vol = [v for v in spec["volumes"] if v["name"] == mount[0]["name"]][0]
        self.assertEqual(vol["configMap"]["name"], "vgpu-volcano-device-config")
        self.assertEqual(os.path.basename(path), "device-config.yaml")
        # The monitor watches the same containers; Volcano schedules, so no vgpu-scheduler,
        # no kube-scheduler profile, no webhook.
        self.assertEqual(len(find(objects, "DaemonSet", "vgpu-monitor")), 1)
        self.assertEqual(find(objects, "Deployment"), [])
        self.assertEqual(find(objects, "MutatingWebhookConfiguration"), [])
        self.assertEqual([p for o in objects for p in validate(o)], [])

    def test_rbac_is_least_privilege(self):
        """What vgpu mode grants, plus pods patch for the write-back (bind-phase,
        devices-to-allocate, vgpu-time): no get/update/delete, no other resource."""
        objects = rendering("volcano")
        flat = {o["metadata"]["name"]: sorted("%s:%s" % (res, v) for r in o["rules"]
                                              for res in r["resources"] for v in r["verbs"])
                for o in find(objects, "ClusterRole")}
        self.assertEqual(flat, {"vgpu-device-plugin": ["nodes:patch", "pods:list", "pods:patch",
                                                       "pods:watch"],
                                "vgpu-monitor": ["events:create", "pods/status:patch",
                                                 "pods:list", "pods:watch"]})
        self.assertEqual(sorted(o["kind"] for o in objects if o["kind"].endswith("Binding")),
                         ["ClusterRoleBinding", "ClusterRoleBinding", "RoleBinding"])
        # vgpu mode's one namespaced grant: reading vgpu-scheduler's decision records in
        # its own namespace (a resized decision is applied only when its record agrees).
        self.assertEqual([(o["metadata"]["namespace"], o["rules"]) for o in find(objects, "Role")],
                         [("vgpu-system", [{"apiGroups": [""], "resources": ["configmaps"],
                                            "verbs": ["get"]}])])

    def volcano_run(self, authz):
        """A Volcano pod through the rendered node side under authz: the device plugin in
        Volcano mode registers its three resources, Volcano's decision is written by the
        scheduler stand-in (tests/volcano_scheduler.py, with admin rights: Volcano's own
        roles are Volcano's), kubelet's Allocate gets the container. The requests the API
        server refused."""
        import deviceplugin_kubelet as dk
        import volcano_scheduler as V
        if not dk.M:
            dk.load_messages(os.path.join(BUILD, "gen", "grpc", "kubelet", "api.desc"))
        objects = rendering("volcano")
        box = Box(objects, authz)
        kubelet = None
        try:
            kdir = os.path.join(box.dir, "node-1", "host/var/lib/kubelet/device-plugins")
            os.makedirs(kdir, exist_ok=True)
            kubelet = dk.FakeKubelet(kdir)
            box.start_device_plugin()
            ids = wait_for(lambda: kubelet.latest(V.ALLOCATABLE[0]), what="volcano.sh/vgpu-number")
            wait_for(lambda: all(kubelet.latest(n) for n in V.ALLOCATABLE), what="3 resources")
            volcano = V.Api("http://127.0.0.1:%d" % box.api_port, box.admin_token)
            # kubelet's part: the node's Allocatable from the devices each resource lists.
            volcano.ok("PATCH", "/api/v1/nodes/node-1", {"status": {"allocatable": {
                n: str(len(kubelet.latest(n))) for n in V.ALLOCATABLE}}},
                "application/merge-patch+json")
            wait_for(lambda: V.REGISTER in (box.api("GET", "/api/v1/nodes/node-1")[1]
                                            ["metadata"].get("annotations") or {}),
                     what="the node's vGPU register")
            pod = {"metadata": {"name": "p", "namespace": "default"},
                   "spec": {"schedulerName": "volcano", "containers": [{
                       "name": "main", "image": "cuda", "resources": {"limits": {
                           "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"}}}]},
                   "status": {"phase": "Pending"}}
            status, body = box.api("POST", "/api/v1/namespaces/default/pods", pod)
            assert status == 201, body
            V.Scheduler(volcano).schedule("default", "p")
            kubelet.allocate(V.ALLOCATABLE[0], [ids[0][0]])

            def settled():
                phase = (box.api("GET", "/api/v1/namespaces/default/pods/p")[1]["metadata"]
                         .get("annotations") or {}).get(V.BIND_PHASE)
                return phase == "success" or box.forbidden()
            wait_for(settled, what="the write-back or a refusal")
            return box.forbidden()
        finally:
            if kubelet is not None:
                kubelet.stop()
            box.stop()

    def test_rendered_roles_suffice(self):
        self.assertEqual(self.volcano_run(authz_from(rendering("volcano"))), [])

    def test_the_write_back_needs_pods_patch(self):
        sa = "system:serviceaccount:vgpu-system:vgpu-device-plugin"
        authz = without_verb(authz_from(rendering("volcano")), sa, "pods", "patch")
        refused = self.volcano_run(authz)
        self.assertTrue(any(sa + " patch pods default/p" in r for r in refused), refused)


class NoGpu(unittest.TestCase):
    def test_device_plugin_and_monitor_stay_up_without_a_driver(self):
        objects = rendering("vgpu")
        for case, env in (("no driver library", {"LD_LIBRARY_PATH": "/nonexistent"}),
                          ("a driver that fails", {"FAKEGPU_DEVICES": "broken"})):
            with self.subTest(case=case):
                box = Box(objects)
                try:
                    dp = box.start_device_plugin(env=env)
                    mon = box.start_monitor(env=env)
                    wait_for(lambda: "serving no GPUs" in box.log("device-plugin"),
                             what="the device plugin's log line")
                    wait_for(lambda: "no NVIDIA driver on this node" in box.log("monitor"),
                             what="the monitor's log line")
                    time.sleep(0.5)
                    self.assertIsNone(dp.poll(), box.log("device-plugin"))
                    self.assertIsNone(mon.poll(), box.log("monitor"))
                finally:
                    codes = box.stop()
                # Stopped by SIGTERM, both exit 0: a clean stop, not a failure.
                self.assertEqual(codes["device-plugin"], 0)
                self.assertEqual(codes["monitor"], 0)

    def test_idle_without_gpu_hides_no_other_failure(self):
        """--idle-without-gpu covers a missing driver only: bad API credentials still
        exit 1 with their message."""
        objects = rendering("vgpu")
        box = Box(objects)
        try:
            bad = os.path.join(box.dir, "kubeconfig-bad")
            with open(bad, "w") as f:
                f.write("current-context: nope\n")
            mon = box.start_monitor(env={"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu")},
                                    kubeconfig=False)
            self.assertIsNone(mon.poll())
            box.stop_one("monitor")
            proc = box.spawn("monitor-bad", [os.path.join(BUILD, "bin", "vgpu-monitor"),
                                             "--idle-without-gpu", "--kubeconfig=" + bad,
                                             "--node-name=node-1"],
                             {"LD_LIBRARY_PATH": os.path.join(BUILD, "fakegpu"),
                              "FAKEGPU_DEVICES": FAKE_DEVICES,
                              "FAKEGPU_STATE_DIR": os.path.join(box.dir, "fakegpu")})
            self.assertEqual(proc.wait(20), 1, box.log("monitor-bad"))
            self.assertIn("kubeconfig", box.log("monitor-bad"))
        finally:
            box.stop()


if __name__ == "__main__":
    BUILD, SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
    sys.path.insert(0, os.path.join(SOURCE, "tests"))  # volcano_scheduler
    help_text = subprocess.run([os.path.join(BUILD, "bin", "vgpu-monitor"), "--help"],
                               capture_output=True, text=True).stdout
    if "--listen" not in help_text:
        MONITOR_LISTEN = ("vgpu-monitor: container vgpu-monitor: `--policy=kill "
                          "--region-dir=/usr/local/vgpu/containers --idle-without-gpu "
                          "--listen=:9394` refused (exit 2): vgpu-monitor: unknown flag "
                          "'--listen'")
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
