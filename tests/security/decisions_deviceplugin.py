#!/usr/bin/env python3
"""A pod author forges vgpu.io/decision to reach another pod's container: vgpu-device-plugin.

    /usr/bin/python3 decisions_deviceplugin.py BUILD_DIR SOURCE_DIR [unittest names...]

The plugin runs on fakegpu against tests/kube_api_server.py and the fake kubelet of
tests/integration/deviceplugin_kubelet.py. A victim pod is bound with the scheduler's
decision; attackers on the same node carry decisions of their own, older (time 0) and
naming the victim's GPU. kubelet then allocates the victim's container: it must get the
victim's limits, and no attacker's name reaches a path, the environment, a log line or a
file (docs/security.md, "Decisions only the scheduler can write").
"""
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import deviceplugin_kubelet as K  # noqa: E402  (skips, or fails under CI, without grpc)

grpc = K.grpc


def decision(uuid, mib, cores, container="main", t=None):
    return json.dumps({"version": 1, "node": "node-1",
                       "time": int(time.time()) if t is None else t,
                       "containers": [{"name": container, "gpus": [
                           {"uuid": uuid, "memoryMiB": mib, "cores": cores}]}]})


class ForgedAllocateTest(K.Base):
    def start(self):
        self.api = K.ApiServer(self.tmp)
        self.kubelet = K.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = K.Plugin(self.tmp, K.VGPU, kubeconfig=self.api.kubeconfig)
        self.registered()
        devs = K.wait_for(lambda: self.kubelet.latest("nvidia.com/gpu"), what="list")
        return [d for d, _ in devs]

    def attacker(self, name, text, containers, scheduler="vgpu-scheduler"):
        pod = K.ApiServer.pod_for(name, text, scheduler)
        pod["spec"]["containers"] = containers
        return self.api.add_pod(name, text, pod)

    def victim_allocated(self, attack):
        """Starts the plugin, lets attack(target GPU) create the attackers' pods, binds the
        victim last and allocates its container: it must get the victim's own limits,
        and no attacker's name may reach a path, the environment or the log."""
        ids = self.start()
        target = sorted({d.rsplit("-", 1)[0] for d in ids})[0]
        attack(target)
        uid = self.api.add_pod("victim", decision(target, 1024, 30))["metadata"]["uid"]
        cdir = os.path.join(self.tmp, "containers", "%s_main" % uid)
        # The watch delivers events in order: once the victim's directory is prepared,
        # the plugin has seen every attacker.
        K.wait_for(lambda: os.path.exists(os.path.join(self.tmp, "containers",
                                                       ".ready.%s_main" % uid)),
                   what="victim's prepared directory")
        mine = [d for d in ids if d.startswith(target)]
        resp = self.kubelet.allocate("nvidia.com/gpu", mine[:1])
        env = dict(resp.container_responses[0].envs)
        self.assertEqual(env["CUDA_DEVICE_MEMORY_LIMIT_0"], "1024m", env)
        self.assertEqual(env["CUDA_DEVICE_SM_LIMIT"], "30", env)
        self.assertEqual(env["VGPU_LIMITS_FILE"], cdir + "/etc/limits")
        with open(cdir + "/etc/limits") as f:
            limits = f.read()
        self.assertIn("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n", limits)
        self.assertIn("pod default/victim, container main\n", limits)
        for entry in os.listdir(os.path.join(self.tmp, "containers")):
            self.assertTrue(entry.endswith("_main") and uid in entry, entry)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "escape")))
        for k, v in env.items():
            self.assertNotIn("\n", k + v)
        # A second container asking for one GPU: no attacker's decision is usable for it.
        with self.assertRaises(grpc.RpcError) as cm:
            self.kubelet.allocate("nvidia.com/gpu", mine[1:2])
        self.assertIn("no scheduling decision", cm.exception.details())
        return self.plugin.output() + cm.exception.details()

    def test_no_gpu_request_time_zero(self):
        """A pod that asks for no GPU, with a decision older than anyone's."""
        self.victim_allocated(lambda target: self.attacker(
            "no-request", decision(target, 1, 1, t=0), [{"name": "main"}]))

    def test_names_that_reach_paths(self):
        """Container names with a newline, or that climb out of a directory."""
        bad = ["main\nVGPU_LIMITS_FILE=/dev/null", "../../escape", "a/b", ".."]
        one_gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}

        def attack(target):
            for i, name in enumerate(bad):
                self.attacker("bad-name-%d" % i, decision(target, 1, 1, name, t=0),
                              [dict(one_gpu, name=name)])
        out = self.victim_allocated(attack)
        for piece in ("VGPU_LIMITS_FILE=/dev/null", "escape", "a/b"):
            self.assertNotIn(piece, out)

    def test_foreign_scheduler(self):
        """Everything right but spec.schedulerName: a pod vgpu-scheduler never placed."""
        one_gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
        out = self.victim_allocated(lambda target: self.attacker(
            "foreign", decision(target, 1, 1, t=0), [dict(one_gpu, name="main")],
            scheduler="default-scheduler"))
        self.assertIn("not scheduled by vgpu-scheduler", out)


if __name__ == "__main__":
    K.BUILD, K.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    K.load_messages(os.path.join(K.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
