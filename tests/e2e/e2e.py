"""Cluster in a box: the rendered vgpu overlay, run (make e2e; docs/install.md).

    /usr/bin/python3 tests/e2e/e2e.py BUILD_DIR SOURCE_DIR

The test API server enforcing the rendered RBAC; vgpu-scheduler with its webhook, started
with the Deployment's arguments; two nodes, each with its own fakegpu (two GPUs), the
device plugin and the monitor started with the DaemonSets' arguments, and a kubelet
stand-in (the fake kubelet of the device-plugin tests). A kube-scheduler-like driver
sends each pod through the webhook (as kube-apiserver's admission does), then /filter,
/prioritize and /bind over both nodes. The kubelet stand-in allocates the pod's
container and runs its workload: a CUDA process on fakegpu under libvgpu, with the
environment Allocate returned. Pods are HAMi's examples from its documentation.

Checked: each pod placed on a node and GPUs whose inventory holds it (no GPU over its
memory or slots, summed from the bound pods' decisions), the limit seen and enforced
inside each workload (total memory = the limit; half of it allocates, one and a half
is refused), a running workload resized with `vgpu resize` (the new limit seen inside a
CUDA process of it, without a restart, when root can bind its limits at /etc/vgpu), the scheduler's and the monitors' metrics, a node whose device plugin and
monitor restart (its running containers keep their limits files, the node serves new
pods), and a scheduler killed and restarted (state rebuilt from the API: the next pods
still fit). Every API request is checked against the rendered roles: any refusal fails.
"""
import json
import base64
import os
import ssl
import subprocess
import sys
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import deploy_test as d  # noqa: E402  (skips when kubectl or python3-kubernetes is missing)
import deviceplugin_kubelet as dk  # noqa: E402  (skips when grpc is missing)

NODES = ("node-1", "node-2")
GIB = 16384  # MiB per fake GPU
# Each node's GPUs: fakegpu derives UUIDs from index and name, so the names differ.
DEVICES = {"node-1": "NVIDIA H100 80GB HBM3:16GiB:132,NVIDIA H100 80GB HBM3:16GiB:132",
           "node-2": "NVIDIA H100 NVL:16GiB:132,NVIDIA H100 NVL:16GiB:132"}


def hami_pod(name, limits, annotations=None):
    """HAMi's example pods (README "Running GPU jobs", examples/nvidia/*.yaml): an
    ubuntu container sleeping, with vgpu resources in its limits."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "ubuntu-container", "image": "ubuntu:18.04",
                                     "command": ["bash", "-c", "sleep 86400"],
                                     "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


PODS = [
    # README: 1 vGPU, 3000 MiB, 30 % of the cores.
    hami_pod("gpu-pod", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000,
                         "nvidia.com/gpucores": 30}),
    # examples/nvidia/specify_memory_usage.yaml: memory as a share of the card.
    hami_pod("gpu-pod-percentage", {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}),
    # examples/nvidia/specify_card_type_to_use.yaml: a GPU type by name.
    hami_pod("gpu-pod-type", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000},
             {"nvidia.com/use-gputype": "H100"}),
    # examples/nvidia/default_use.yaml: two vGPUs of 3000 MiB.
    hami_pod("gpu-pod-two", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000}),
]


class Cluster:
    def __init__(self):
        self.objects = d.rendering("vgpu")
        self.box = d.Box(self.objects, d.authz_from(self.objects), nodes=NODES)
        self.kubelets = {}
        self.metrics = {}
        self.penv = {}  # pod name -> its workload's environment
        for n in NODES:
            self.start_node(n)
        self.box.start_scheduler()
        self.wait_scheduler()
        self.ctx = ssl.create_default_context(cafile=self.box.cert)
        self.ctx.check_hostname = False

    def check_refusals(self):
        f = self.box.forbidden()
        assert not f, "refused by the rendered RBAC: %s" % f

    def until(self, pred, what, timeout=30):
        def step():
            self.check_refusals()
            return pred()
        return d.wait_for(step, timeout=timeout, what=what)

    def start_node(self, n, restart=False):
        kdir = os.path.join(self.box.dir, n, "host/var/lib/kubelet/device-plugins")
        os.makedirs(kdir, exist_ok=True)
        if n not in self.kubelets:
            self.kubelets[n] = dk.FakeKubelet(kdir)
        before = len(self.kubelets[n].registrations)
        env = {"FAKEGPU_DEVICES": DEVICES[n]}
        self.box.start_device_plugin(node=n, env=env)
        self.metrics[n] = os.path.join(self.box.dir, n, "monitor.prom")
        self.box.start_monitor(node=n, env=env,
                               args_extra=["--metrics-file=" + self.metrics[n]])
        self.until(lambda: len(self.kubelets[n].registrations) > before,
                   "%s: the device plugin's registration" % n)
        self.until(lambda: self.inventory(n), "%s: the inventory" % n)

    def inventory(self, n):
        text = self.box.api("GET", "/api/v1/nodes/" + n)[1]["metadata"].get(
            "annotations", {}).get("vgpu.io/gpus")
        return json.loads(text) if text else None

    def wait_scheduler(self):
        self.until(lambda: self.box.ext("GET", "/readyz")[0] == 200, "the scheduler's watches")

    def admit(self, pod):
        """kube-apiserver's admission: the webhook's JSON patch applied to the pod."""
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": pod["metadata"]["name"], "operation": "CREATE",
                              "namespace": "default", "object": pod}}
        conn = http.client.HTTPSConnection("127.0.0.1", self.box.webhook_port,
                                           context=self.ctx, timeout=30)
        conn.request("POST", "/webhook", json.dumps(review), {"Content-Type": "application/json"})
        resp = json.loads(conn.getresponse().read())["response"]
        conn.close()
        assert resp["allowed"], resp
        for op in json.loads(base64.b64decode(resp.get("patch", "")) or b"[]"):
            parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            target = pod
            for p in parts[:-1]:
                target = target[int(p)] if isinstance(target, list) else target[p]
            last = parts[-1]
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), op["value"])
            else:
                target[last] = op["value"]
        return pod

    def schedule(self, pod):
        """kube-scheduler's part: filter, prioritize, bind to the best node."""
        pod = self.admit(pod)
        assert pod["spec"].get("schedulerName") == "vgpu-scheduler", pod["spec"]
        status, pod = self.box.api("POST", "/api/v1/namespaces/default/pods", pod)
        assert status == 201, (status, pod)

        def fits():
            s, body = self.box.ext("POST", "/filter", {"Pod": pod, "Nodes": None,
                                                       "NodeNames": list(NODES)})
            return s == 200 and body.get("NodeNames")
        names = self.until(fits, "a node for " + pod["metadata"]["name"])
        s, scores = self.box.ext("POST", "/prioritize", {"Pod": pod, "Nodes": None,
                                                         "NodeNames": names})
        assert s == 200, scores
        best = max(scores, key=lambda h: (h["Score"], h["Host"]))["Host"] if scores else names[0]
        s, body = self.box.ext("POST", "/bind", {
            "PodName": pod["metadata"]["name"], "PodNamespace": "default",
            "PodUID": pod["metadata"]["uid"], "Node": best})
        self.check_refusals()
        assert s == 200 and not body.get("Error"), body
        return self.box.api("GET", "/api/v1/namespaces/default/pods/" + pod["metadata"]["name"])[1]

    def run(self, pod):
        """kubelet's part: Allocate for the pod's container, then its workload."""
        node = pod["spec"]["nodeName"]
        kubelet = self.kubelets[node]
        decision = json.loads(pod["metadata"]["annotations"]["vgpu.io/decision"])
        gpus = [g["uuid"] for g in decision["containers"][0]["gpus"]]
        ids = [i for i, _ in kubelet.latest("nvidia.com/gpu")]
        want = len(gpus)
        pref = self.until(lambda: (lambda p: p if p and {x.rsplit("-", 1)[0] for x in p}
                                   == set(gpus) else None)(
            kubelet.preferred("nvidia.com/gpu", ids, want)), "the decision at " + node)
        resp = kubelet.allocate("nvidia.com/gpu", pref).container_responses[0]
        env = dict(resp.envs)
        limits = [int(env["CUDA_DEVICE_MEMORY_LIMIT_%d" % i].rstrip("m")) for i in range(want)]
        assert limits == [g["memoryMiB"] for g in decision["containers"][0]["gpus"]], (env, decision)
        penv = self.workload_env(node, env,
                                 ",".join(str(dk.order_index(ids, u)) for u in gpus))
        probe = os.path.join(d.BUILD, "bin", "libvgpu_probe")
        info = subprocess.run([probe, "dlsym", "info"], env=penv, capture_output=True,
                              text=True, timeout=60)
        assert info.returncode == 0, info.stdout + info.stderr
        assert "total=%d " % (limits[0] << 20) in info.stdout, (info.stdout, env)
        assert self.hold(probe, penv, (limits[0] << 20) // 2) == "ready"
        assert self.hold(probe, penv, (limits[0] << 20) * 3 // 2) == "oom"
        self.penv[pod["metadata"]["name"]] = penv
        return env

    def workload_env(self, node, env, visible):
        """The environment of a container's process on node: Allocate's env, the devices
        the runtime makes visible, libvgpu preloaded (/etc/ld.so.preload's part)."""
        penv = dict(self.box.plugin_env[node])
        penv.update(env)
        penv["CUDA_VISIBLE_DEVICES"] = visible
        penv["LD_PRELOAD"] = os.path.join(d.BUILD, "lib", "libvgpu.so")
        penv["ASAN_OPTIONS"] = ":".join(filter(None, [penv.get("ASAN_OPTIONS"),
                                                      "verify_asan_link_order=0"]))
        return penv

    @staticmethod
    def hold(probe, env, size):
        proc = subprocess.Popen([probe, "dlsym", "hold", str(size)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = proc.stdout.readline().strip()
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        return line.split()[0] if line else line

    def check_capacity(self):
        """Summed from the API alone: no GPU holds more memory or containers than its
        inventory offers."""
        caps = {}
        for n in NODES:
            for g in self.inventory(n)["gpus"]:
                caps[n, g["uuid"]] = [g["memoryMiB"], g["slots"]]
        for pod in self.box.api("GET", "/api/v1/pods")[1]["items"]:
            text = pod["metadata"].get("annotations", {}).get("vgpu.io/decision")
            if not text or not pod["spec"].get("nodeName"):
                continue
            for c in json.loads(text)["containers"]:
                for g in c.get("gpus", []):
                    key = (pod["spec"]["nodeName"], g["uuid"])
                    assert key in caps, (pod["metadata"]["name"], key)
                    cap = caps[key]
                    cap[0] -= g["memoryMiB"]
                    cap[1] -= 1
        over = {u: c for u, c in caps.items() if c[0] < 0 or c[1] < 0}
        assert not over, over

    def resize_running(self, name, mib):
        """`vgpu resize` of a running workload: the command succeeds with the rendered
        roles, the node rewrites the container's limits, and a CUDA process running in the
        container (its limits directory bound at /etc/vgpu, as the runtime mounts it; root
        and a private mount namespace) sees the new limit without a restart."""
        path = "/api/v1/namespaces/default/pods/" + name
        conn = http.client.HTTPConnection("127.0.0.1", self.box.api_port, timeout=30)
        conn.request("PATCH", path + "/status", json.dumps({"status": {"phase": "Running"}}),
                     {"Content-Type": "application/merge-patch+json",
                      "Authorization": "Bearer " + self.box.admin_token})
        assert conn.getresponse().status == 200
        conn.close()
        pod = self.box.api("GET", path)[1]
        node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
        etc = os.path.join(self.box.region_dirs[node], "%s_ubuntu-container" % uid, "etc")
        watcher = None
        if os.geteuid() == 0 and subprocess.run(["unshare", "--mount", "true"]).returncode == 0:
            env = dict(self.penv[name])
            env.pop("VGPU_LIMITS_FILE", None)  # the container reads /etc/vgpu/limits
            watcher = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                 'if [ -d /etc/vgpu ]; then mount -t tmpfs tmpfs /etc/vgpu; else '
                 'w=$(mktemp -d); mkdir -p "$w/u" "$w/w"; mount -t overlay overlay -o '
                 '"lowerdir=/etc,upperdir=$w/u,workdir=$w/w" /etc; mkdir /etc/vgpu; fi; '
                 'mount --bind "$0" /etc/vgpu && mount -o remount,bind,ro /etc/vgpu && '
                 'exec "$1"', etc, os.path.join(d.BUILD, "bin", "libvgpu_resize_watch")],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert watcher.stdout.readline().strip() == "ready"
        r = subprocess.run([os.path.join(d.BUILD, "bin", "vgpu"), "resize", name, "--gpumem",
                            str(mib), "--kubeconfig", self.box.kubeconfig("admin")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        self.until(lambda: "CUDA_DEVICE_MEMORY_LIMIT_0=%dm\n" % mib in
                   open(os.path.join(etc, "limits")).read(), "the node's new limits file")
        if watcher is not None:
            watcher.stdin.write("wait %d 5000\n" % (mib << 20))
            watcher.stdin.flush()
            seen = watcher.stdout.readline().strip()
            watcher.stdin.close()
            watcher.wait(10)
            watcher.stdout.close()
            assert seen.startswith("applied"), seen
        print("%-20s resized to %d MiB: %s%s" % (name, mib, r.stdout.strip(),
                                                 " (seen inside)" if watcher else ""))

    def stop(self):
        for k in self.kubelets.values():
            k.stop()
        return self.box.stop()

    def finish(self, ok):
        """Stops everything, printing the logs of a failed run. After a run that passed,
        every daemon must have stopped cleanly on SIGTERM (under the sanitizers: nothing
        leaked)."""
        if not ok:
            for name in self.box.logs:
                print("---- %s\n%s" % (name, self.box.log(name)[-3000:]))
        logs = {name: self.box.log(name) for name in self.box.logs}
        codes = self.stop()
        bad = {n: code for n, code in codes.items() if n != "api" and code != 0}
        assert not ok or not bad, [(n, code, logs[n][-2000:]) for n, code in bad.items()]


def main():
    d.BUILD, d.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.BUILD, dk.SOURCE = d.BUILD, d.SOURCE
    dk.load_messages(os.path.join(d.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    start = time.time()
    c = Cluster()
    ok = False
    try:
        placed = {}
        for pod in PODS:
            bound = c.schedule(pod)
            env = c.run(bound)
            placed[pod["metadata"]["name"]] = bound["spec"]["nodeName"]
            print("%-20s -> %s  %s" % (pod["metadata"]["name"], bound["spec"]["nodeName"],
                                      " ".join("%s=%s" % kv for kv in sorted(env.items())
                                               if kv[0].startswith(("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM")))))
        c.check_capacity()
        c.resize_running("gpu-pod", 4000)
        c.check_capacity()
        pct = [p for p in c.box.api("GET", "/api/v1/pods")[1]["items"]
               if p["metadata"]["name"] == "gpu-pod-percentage"][0]
        assert json.loads(pct["metadata"]["annotations"]["vgpu.io/decision"])[
            "containers"][0]["gpus"][0]["memoryMiB"] == GIB // 2

        # Metrics: the scheduler's (its loopback address) and each node's monitor.
        s, text = c.box.ext("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else json.dumps(text)
        assert s == 200 and "vgpu_scheduler_" in text, text[:500]
        for n in NODES:
            c.until(lambda: os.path.exists(c.metrics[n]) and
                    "vgpu_monitor_samples_total" in open(c.metrics[n]).read(),
                    "%s: the monitor's metrics" % n)

        # A node restarts its vgpu daemons: containers keep their limits files, and
        # the node takes new pods.
        victim = placed["gpu-pod"]
        uid = c.box.api("GET", "/api/v1/namespaces/default/pods/gpu-pod")[1]["metadata"]["uid"]
        limits_file = os.path.join(c.box.region_dirs[victim], "%s_ubuntu-container" % uid,
                                   "etc", "limits")
        for what in ("device-plugin", "monitor"):
            assert c.box.stop_one(d.Box.proc_name(what, victim)) == 0, what
        c.start_node(victim)
        assert os.path.exists(limits_file), limits_file
        # A scheduler killed and restarted rebuilds its state from the API.
        c.box.procs["scheduler"].kill()
        c.box.procs["scheduler"].wait()
        c.box.start_scheduler()
        c.wait_scheduler()
        for i in range(3):
            bound = c.schedule(hami_pod("after-restart-%d" % i, {
                "nvidia.com/gpu": 1, "nvidia.com/gpumem": 6000}))
            c.run(bound)
            placed[bound["metadata"]["name"]] = bound["spec"]["nodeName"]
        c.check_capacity()
        print("placement: %s" % json.dumps(placed, sort_keys=True))
        # binpack: the first pods share node-1's GPUs; once they are full, node-2.
        assert placed["gpu-pod"] == placed["gpu-pod-percentage"] == "node-1", placed
        assert set(placed.values()) == set(NODES), placed
        c.check_refusals()
        for name, p in c.box.procs.items():
            assert p.poll() is None or name == "scheduler-old", (name, c.box.log(name)[-2000:])
        ok = True
    finally:
        c.finish(ok)
    elapsed = time.time() - start
    print("cluster in a box: %d pods placed, allocated and run on %d nodes in %.1f s"
          % (len(PODS) + 3, len(NODES), elapsed))
    assert elapsed < 120, elapsed
    return 0


if __name__ == "__main__":
    sys.exit(main())
