"""Dynamic MIG in the cluster in a box (the device-plugin path): the rendered vgpu overlay
on the test API server with its RBAC, vgpu-scheduler and its webhook, one node whose
fakegpu has two H100 80GB in MIG mode without instances (FAKEGPU_MIG="0:;1:"), its device
plugin in dynamic MIG mode (VGPU_MIG_MODE=dynamic, the DaemonSet's other arguments as
rendered) and the kubelet stand-in of tests/e2e/e2e.py.

    /usr/bin/python3 tests/e2e/mig.py BUILD_DIR SOURCE_DIR

Checked: HAMi's pods of 9,000 and 18,000 MiB are placed by the scheduler on a MIG
profile and start, Allocate makes those instances and gives each container its MIG
device, a CUDA process there under libvgpu sees the instance (its memory, limited by
libvgpu to the decision's), the node's inventory names each instance's pod; deleting one
pod destroys its instance, and only its, within 5 s; every API request passes the
rendered roles.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e  # noqa: E402  (skips when kubectl, python3-kubernetes or grpc is missing)

d, dk = e2e.d, e2e.dk
H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"


class MigCluster(e2e.Cluster):
    def start_node(self, n, restart=False):
        e2e.DEVICES[n] = H100 + "," + H100
        orig = self.box.start_device_plugin

        def dynamic(**kw):
            kw["env"] = dict(kw.get("env") or {}, FAKEGPU_MIG="0:;1:", VGPU_MIG_MODE="dynamic")
            return orig(**kw)
        self.box.start_device_plugin = dynamic
        try:
            super().start_node(n, restart)
        finally:
            self.box.start_device_plugin = orig

    def status(self, n):
        out = subprocess.run([os.path.join(d.BUILD, "bin", "fakegpu-ctl"), "status"],
                             env=self.box.plugin_env[n], capture_output=True, text=True,
                             check=True).stdout
        return sorted(line.split()[3] for line in out.splitlines() if line.startswith("  mig "))

    def allocate(self, pod):
        node = pod["spec"]["nodeName"]
        kubelet = self.kubelets[node]
        share = json.loads(pod["metadata"]["annotations"]["vgpu.io/decision"])[
            "containers"][0]["gpus"][0]
        ids = [i for i, _ in kubelet.latest("nvidia.com/gpu")]
        pref = self.until(lambda: (lambda p: p if p and p[0].startswith(share["uuid"])
                                   else None)(kubelet.preferred("nvidia.com/gpu", ids, 1)),
                          "the decision at " + node)
        env = dict(kubelet.allocate("nvidia.com/gpu", pref).container_responses[0].envs)
        return share, env


def main():
    d.BUILD, d.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.BUILD, dk.SOURCE = d.BUILD, d.SOURCE
    dk.load_messages(os.path.join(d.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    e2e.NODES = ("node-1",)
    c = MigCluster()
    ok = False
    try:
        inv = c.inventory("node-1")
        assert all(g.get("mig", {}).get("slices") == 8 for g in inv["gpus"]), inv
        migs = {}
        for name, mib in (("mig-small", 9000), ("mig-large", 18000)):
            bound = c.schedule(e2e.hami_pod(name, {"nvidia.com/gpu": 1,
                                                   "nvidia.com/gpumem": mib}))
            share, env = c.allocate(bound)
            assert "mig" in share and share["memoryMiB"] >= mib, share
            mig = env["NVIDIA_VISIBLE_DEVICES"]
            assert mig.startswith("MIG-"), env
            migs[name] = (mig, share)
            # The container's CUDA process under libvgpu: the MIG device, held to the
            # decision's memory.
            penv = c.workload_env("node-1", env, mig)
            probe = os.path.join(d.BUILD, "bin", "libvgpu_probe")
            info = subprocess.run([probe, "dlsym", "info"], env=penv, capture_output=True,
                                  text=True, timeout=60)
            assert info.returncode == 0, info.stdout + info.stderr
            assert "total=%d " % (share["memoryMiB"] << 20) in info.stdout, (info.stdout, env)
            print("%-10s %5d MiB -> %s at slice %d: %s" % (name, mib, share["mig"]["profile"],
                                                          share["mig"]["start"], mig))
        assert c.status("node-1") == sorted(m for m, _ in migs.values())
        pods = {p["metadata"]["uid"]: p["metadata"]["name"]
                for p in c.box.api("GET", "/api/v1/pods")[1]["items"]}
        owners = c.until(lambda: (lambda o: o if len(o) == 2 else None)(
            {pods.get(i["pod"]) for g in c.inventory("node-1")["gpus"]
             for i in g["mig"].get("instances", []) if i["pod"]}), "the instances' owners")
        assert owners == {"mig-small", "mig-large"}, owners
        t0 = time.monotonic()
        c.box.api("DELETE", "/api/v1/namespaces/default/pods/mig-small")
        c.until(lambda: c.status("node-1") == [migs["mig-large"][0]],
                "mig-small's instance destroyed, mig-large's kept", timeout=5)
        print("instance of a deleted pod destroyed in %.0f ms" % ((time.monotonic() - t0) * 1e3))
        c.check_refusals()
        ok = True
    finally:
        c.finish(ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
