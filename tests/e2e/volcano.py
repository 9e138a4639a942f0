"""Cluster in a box, Volcano node: the rendered Volcano overlay, run (make e2e;
docs/volcano.md).

    /usr/bin/python3 tests/e2e/volcano.py BUILD_DIR SOURCE_DIR [--bench N]

The test API server enforcing the rendered RBAC; one node with its own fakegpu (two
24 GiB GPUs), the device plugin (--scheduler-protocol=volcano, Volcano's device-config.yaml
from the overlay's ConfigMap) and the monitor started with the DaemonSets' arguments, and a
kubelet stand-in (the fake kubelet of the device-plugin tests) that publishes the node's
Allocatable as kubelet does from the registered devices. Volcano's scheduler is the
stand-in tests/volcano_scheduler.py (current Volcano: the decision on the Binding; v1.15:
PATCH, then the Binding; the node lock on). The kubelet stand-in then allocates each GPU
container (Allocate of volcano.sh/vgpu-number with as many devices as the container asks,
in the order of spec.containers) and runs its workload on fakegpu under libvgpu, with the
environment Allocate returned LESS every limit variable (CUDA_DEVICE_MEMORY_LIMIT*,
CUDA_DEVICE_SM_LIMIT*): what holds it is what the device plugin wrote, the read-only
limits file (here named by VGPU_LIMITS_FILE, in a container at /etc/vgpu/limits) and the
container's region; a limit variable the workload sets four times higher changes nothing.

Checked: Volcano's example pods (its documentation's hami-pod and gpu-pod12) placed,
allocated and run: the limit seen inside (total memory = the decision), half of it
allocates, one and a half is refused; NVIDIA_VISIBLE_DEVICES names the decided cards; the
write-back (bind-phase success, devices-to-allocate consumed); a gang of four pods of
10 GiB / 25 cores on the node's two GPUs, two per card, whose compute shares hold on
fakegpu's timeline (two tenants of one card, each 25 % within 3 points); a pod whose
first container asks for no GPU; a pod with two GPU containers; the node lock released
after each Allocate; every API request within the rendered roles.

--bench N: N pods of one vGPU placed and allocated one after another; prints the time
from the Binding's answer to the container's limits file on disk, p50 and p99
(docs/benchmarks.md).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, ".."))
import deploy_test as d  # noqa: E402  (skips when kubectl or python3-kubernetes is missing)
import deviceplugin_kubelet as dk  # noqa: E402  (skips when grpc is missing)
import volcano_scheduler as V  # noqa: E402
import e2e  # noqa: E402  (the vgpu cluster in a box)

NODE = "volcano-1"
# Two 24 GiB cards: a memory ID per MiB (gpuMemoryFactor 1, Volcano's default) must fit in
# kubelet's 4 MiB device list, which two 40 GiB cards would not (the plugin says so).
DEVICES = "NVIDIA A30:24GiB:56,NVIDIA A30:24GiB:56"
NUMBER, MEMORY, CORES = V.ALLOCATABLE[0], V.ALLOCATABLE[2], V.ALLOCATABLE[1]
LIMIT_VARS = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT")
COMPUTE_TOL = 3  # points of one GPU (docs/compute.md holds shares within 2 on fakegpu)


def volcano_pod(name, containers, annotations=None):
    """A pod as Volcano's documentation writes them: schedulerName volcano, containers
    with volcano.sh/vgpu-* limits (none for a container without GPUs)."""
    cs = []
    for cname, limits in containers:
        c = {"name": cname, "image": "ubuntu:18.04", "command": ["bash", "-c", "sleep 86400"]}
        if limits:
            c["resources"] = {"limits": {"volcano.sh/" + k: str(v) for k, v in limits.items()}}
        cs.append(c)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": dict(annotations or {})},
            "spec": {"schedulerName": "volcano", "containers": cs},
            "status": {"phase": "Pending"}}


# docs/volcano.md "Volcano's example pods", from Volcano's documentation.
HAMI_POD = volcano_pod("hami-pod", [("cuda-container", {"vgpu-number": 1, "vgpu-cores": 50,
                                                        "vgpu-memory": 3000})])
GPU_POD12 = volcano_pod("gpu-pod12", [
    ("ubuntu-container", {"vgpu-number": 2, "vgpu-memory": 2000}),
    ("ubuntu-container0", None),
    ("ubuntu-container1", {"vgpu-number": 2, "vgpu-memory": 3000})])


class Node(e2e.Cluster):
    """The Volcano node; check_refusals and until as the vgpu cluster's."""

    def __init__(self):
        self.objects = d.rendering("volcano")
        self.box = d.Box(self.objects, d.authz_from(self.objects), nodes=(NODE,))
        kdir = os.path.join(self.box.dir, NODE, "host/var/lib/kubelet/device-plugins")
        os.makedirs(kdir, exist_ok=True)
        self.kubelet = dk.FakeKubelet(kdir)
        self.env = {"FAKEGPU_DEVICES": DEVICES}
        self.box.start_device_plugin(node=NODE, env=self.env)
        self.box.start_monitor(node=NODE, env=self.env)
        self.until(lambda: len({r.resource_name for _, r in self.kubelet.registrations}) >= 3,
                   "the three registrations")
        self.ids = {n: [i for i, _ in self.until(lambda n=n: self.kubelet.latest(n),
                                                 "the list of " + n)]
                    for n in (NUMBER, MEMORY, CORES)}
        self.api = V.Api("http://127.0.0.1:%d" % self.box.api_port, self.box.admin_token)
        # kubelet's part: the node's Allocatable from the devices each plugin lists.
        self.api.ok("PATCH", "/api/v1/nodes/" + NODE, {"status": {"allocatable": {
            n: str(len(ids)) for n, ids in self.ids.items()}}}, "application/merge-patch+json")
        self.uuids = []
        for i in self.ids[NUMBER]:
            if i.rsplit("-", 1)[0] not in self.uuids:
                self.uuids.append(i.rsplit("-", 1)[0])
        self.until(lambda: (self.node()["metadata"].get("annotations") or {}).get(V.REGISTER),
                   "the node's vGPU register")

    def node(self):
        return self.box.api("GET", "/api/v1/nodes/" + NODE)[1]

    def pod(self, name):
        return self.box.api("GET", "/api/v1/namespaces/default/pods/" + name)[1]

    def place(self, pod, generation="head", policy=""):
        """Volcano's part: the pod created, then placed by the stand-in (retried while the
        node lock of the previous placement is held)."""
        status, created = self.box.api("POST", "/api/v1/namespaces/default/pods", pod)
        assert status == 201, (status, created)
        sched = V.Scheduler(self.api, generation, policy, node_lock=True)
        node, ann = self.until(lambda: _try(lambda: sched.schedule(
            "default", pod["metadata"]["name"])), "a placement of " + pod["metadata"]["name"],
            timeout=10)
        assert node == NODE, node
        return self.pod(pod["metadata"]["name"]), ann

    def allocate(self, pod):
        """kubelet's part: one Allocate per GPU container, in spec order, with as many
        devices as it asks for. Returns [(container, env, limits file)]."""
        out = []
        for c in pod["spec"]["containers"]:
            limits = (c.get("resources") or {}).get("limits") or {}
            if NUMBER not in limits and MEMORY not in limits:
                continue
            n = int(limits.get(NUMBER, "1"))
            resp = self.kubelet.allocate(NUMBER, self.ids[NUMBER][:n]).container_responses[0]
            env = dict(resp.envs)
            out.append((c["name"], env, env.get("VGPU_LIMITS_FILE")))
        self.check_refusals()
        return out

    def run(self, pod, expect):
        """Allocates the pod and checks each GPU container's workload against expect:
        {container: [(uuid, MiB, cores)]} (the decision)."""
        allocated = self.allocate(pod)
        assert [name for name, _, _ in allocated] == list(expect), (allocated, expect)
        for name, env, limits_file in allocated:
            devs = expect[name]
            assert env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") == [u for u, _, _ in devs], \
                (name, env, devs)
            uid = pod["metadata"]["uid"]
            assert limits_file == os.path.join(self.box.region_dirs[NODE], "%s_%s" % (uid, name),
                                               "etc", "limits"), (limits_file, env)
            text = open(limits_file).read()
            for i, (_, mib, _) in enumerate(devs):
                assert "CUDA_DEVICE_MEMORY_LIMIT_%d=%dm\n" % (i, mib) in text, (text, devs)
            wenv = self.workload_env(env, [u for u, _, _ in devs])
            probe = os.path.join(d.BUILD, "bin", "libvgpu_probe")
            info = subprocess.run([probe, "dlsym", "info"], env=wenv, capture_output=True,
                                  text=True, timeout=60)
            assert info.returncode == 0, info.stdout + info.stderr
            mib = devs[0][1]
            assert "total=%d " % (mib << 20) in info.stdout, (info.stdout, name)
            assert hold(probe, wenv, (mib << 20) // 2) == "ready", name
            assert hold(probe, wenv, (mib << 20) * 3 // 2) == "oom", name
            # A limit variable the workload sets itself, four times higher: nothing changes.
            raised = dict(wenv, **{"CUDA_DEVICE_MEMORY_LIMIT_%d" % i: "%dm" % (m * 4)
                                   for i, (_, m, _) in enumerate(devs)})
            assert hold(probe, raised, (mib << 20) * 3 // 2) == "oom", name
        ann = self.until(lambda: (lambda a: a if a.get(V.BIND_PHASE) == "success" else None)(
            self.pod(pod["metadata"]["name"])["metadata"].get("annotations") or {}),
            "the write-back of " + pod["metadata"]["name"])
        assert ann[V.TO_ALLOCATE].strip(";") == "", ann
        self.until(lambda: V.NODE_LOCK not in (self.node()["metadata"].get("annotations") or {}),
                   "the node lock released")
        return allocated

    def workload_env(self, env, uuids):
        """The container's environment on this box: Allocate's, without any limit
        variable, the GPUs it was given selected among fakegpu's, libvgpu preloaded."""
        wenv = dict(self.box.plugin_env[NODE])
        wenv.update({k: v for k, v in env.items() if not k.startswith(LIMIT_VARS)})
        for k in list(wenv):
            if k.startswith(LIMIT_VARS):
                del wenv[k]
        wenv["CUDA_VISIBLE_DEVICES"] = ",".join(str(self.uuids.index(u)) for u in uuids)
        wenv["LD_PRELOAD"] = os.path.join(d.BUILD, "lib", "libvgpu.so")
        wenv["ASAN_OPTIONS"] = ":".join(filter(None, [wenv.get("ASAN_OPTIONS"),
                                                      "verify_asan_link_order=0"]))
        return wenv

    def stop(self):
        self.kubelet.stop()
        return self.box.stop()


def _try(fn):
    try:
        return fn()
    except V.Unschedulable:
        return None


hold = e2e.Cluster.hold  # libvgpu_probe holding SIZE bytes: "ready" or "oom"


def decision(ann, pod):
    """{container: [(uuid, MiB, cores)]} from vgpu-ids-new, one segment per GPU container."""
    segs = V.decode_pod_devices(ann[V.IDS_NEW])
    names = [c["name"] for c in pod["spec"]["containers"]
             if any(k.startswith("volcano.sh/vgpu-")
                    for k in ((c.get("resources") or {}).get("limits") or {}))]
    assert len(segs) == len(names), (segs, names)
    return {n: [(x["uuid"], x["mem"], x["cores"]) for x in s] for n, s in zip(names, segs)}


def compute_shares(node, envs, uuid):
    """Runs one saturating compute tenant per environment (each a container on card
    uuid) and returns each one's share of the card on fakegpu's timeline (percent)."""
    tenant = os.path.join(d.BUILD, "bin", "compute_tenant")
    truth = os.path.join(d.BUILD, "bin", "libvgpu_compute_truth")
    windows, run_ms = 3, (3 + 1) * 1000 + 700
    procs = [subprocess.Popen([tenant, "1000000", str(run_ms)], env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for e in envs]
    try:
        t = subprocess.run([truth, str(node.uuids.index(uuid)), "1", str(windows)] +
                           [str(p.pid) for p in procs], capture_output=True, text=True,
                           timeout=60, env=envs[0])
    finally:
        outs = [p.communicate(timeout=60)[0] for p in procs]
    assert t.returncode == 0, t.stdout + t.stderr
    assert all(p.returncode == 0 for p in procs), outs
    shares = {}
    for line in t.stdout.splitlines():
        if line.startswith("group="):
            f = dict(kv.split("=") for kv in line.split())
            shares[int(f["group"])] = float(f["mean"])
    assert sorted(shares) == list(range(len(envs))), t.stdout
    return [shares[i] for i in range(len(envs))]


def scenario(node):
    # Volcano's examples, placed by current Volcano (the Binding) and v1.15 (PATCH first).
    for pod, generation in ((HAMI_POD, "head"), (GPU_POD12, "v1.15")):
        bound, ann = node.place(json.loads(json.dumps(pod)), generation)
        expect = decision(ann, bound)
        node.run(bound, expect)
        print("%-10s %-6s -> %s" % (pod["metadata"]["name"], generation, ann[V.IDS_NEW]))
    hami = decision(node.pod("hami-pod")["metadata"]["annotations"], node.pod("hami-pod"))
    assert hami == {"cuda-container": [(node.uuids[1], 3000, 50)]}, hami
    # A pod whose first container asks for no GPU; a pod with two GPU containers.
    side = volcano_pod("sidecar-first", [("log", None), ("main", {"vgpu-memory": 1024,
                                                                  "vgpu-cores": 10})])
    bound, ann = node.place(side)
    node.run(bound, decision(ann, bound))
    two = volcano_pod("two-gpu-containers", [("a", {"vgpu-memory": 1024, "vgpu-cores": 10}),
                                             ("b", {"vgpu-memory": 2048, "vgpu-cores": 10})])
    bound, ann = node.place(two)
    node.run(bound, decision(ann, bound))
    # The gang: four pods of 10 GiB / 25 cores on the two cards, two each (Volcano's
    # spread policy: fewest holders first; the default order would fill card 1 first).
    for p in ("hami-pod", "gpu-pod12", "sidecar-first", "two-gpu-containers"):
        node.box.api("DELETE", "/api/v1/namespaces/default/pods/" + p)
    node.until(lambda: not node.box.api("GET", "/api/v1/pods")[1]["items"], "pods gone")
    gang, envs = [], {}
    for i in range(4):
        bound, ann = node.place(volcano_pod("gang-%d" % i, [("worker", {
            "vgpu-number": 1, "vgpu-memory": 10240, "vgpu-cores": 25})],
            {"scheduling.k8s.io/group-name": "gang"}), policy="spread")
        want = decision(ann, bound)
        (_, env, _), = node.run(bound, want)
        uuid = want["worker"][0][0]
        envs.setdefault(uuid, []).append(node.workload_env(env, [uuid]))
        gang.append(uuid)
    assert sorted(gang) == sorted(node.uuids * 2), gang
    for uuid, es in envs.items():
        shares = compute_shares(node, es, uuid)
        print("gang on %s: compute shares %s (want 25 each, within %d)" % (uuid, shares,
                                                                          COMPUTE_TOL))
        assert all(abs(s - 25) <= COMPUTE_TOL for s in shares), shares
    # A pod of 8000 MiB does not fit beside them: 4096 MiB are left on each card.
    status, _ = node.box.api("POST", "/api/v1/namespaces/default/pods", volcano_pod(
        "too-big", [("worker", {"vgpu-number": 1, "vgpu-memory": 8000, "vgpu-cores": 25})]))
    assert status == 201, status
    try:
        V.Scheduler(node.api, "head").schedule("default", "too-big")
    except V.Unschedulable as e:
        assert "not enough gpu fitted" in str(e), e
    else:
        raise AssertionError("a pod of 8000 MiB was placed on cards with 4096 MiB left")


def bench(node, n):
    """Binding -> limits file: N one-vGPU pods, each deleted after its measurement."""
    sched = V.Scheduler(node.api, "head")
    samples = []
    for i in range(n):
        name = "bench-%d" % i
        pod = volcano_pod(name, [("main", {"vgpu-memory": 1000, "vgpu-cores": 10})])
        status, created = node.box.api("POST", "/api/v1/namespaces/default/pods", pod)
        assert status == 201, created
        sched.schedule("default", name)
        t0 = time.monotonic()
        resp = node.kubelet.allocate(NUMBER, node.ids[NUMBER][:1]).container_responses[0]
        path = dict(resp.envs)["VGPU_LIMITS_FILE"]
        while not os.path.exists(path):
            time.sleep(0.0002)
        samples.append(time.monotonic() - t0)
        node.box.api("DELETE", "/api/v1/namespaces/default/pods/" + name)
    node.check_refusals()
    samples.sort()
    p50 = samples[len(samples) // 2]
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print("binding_to_limits_file: n=%d p50=%.2f ms p99=%.2f ms max=%.2f ms"
          % (n, p50 * 1e3, p99 * 1e3, samples[-1] * 1e3))


def main():
    d.BUILD, d.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.BUILD, dk.SOURCE = d.BUILD, d.SOURCE
    dk.load_messages(os.path.join(d.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    n_bench = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--bench" else 0
    start = time.time()
    node = Node()
    ok = False
    try:
        if n_bench:
            bench(node, n_bench)
        else:
            scenario(node)
        node.check_refusals()
        for name, p in node.box.procs.items():
            assert p.poll() is None, (name, node.box.log(name)[-2000:])
        ok = True
    finally:
        node.finish(ok)
    print("volcano node in a box: %.1f s" % (time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
