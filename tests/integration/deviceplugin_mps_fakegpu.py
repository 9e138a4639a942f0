"""MPS mode end to end: what vgpu-device-plugin's Allocate hands a container holds a CUDA
process on fakegpu to its share of the GPU.

    /usr/bin/python3 deviceplugin_mps_fakegpu.py BUILD_DIR SOURCE_DIR FAKE_MPS_CONTROL [names...]

The plugin runs in MPS mode (4 replicas per GPU; fakegpu GPUs of 4 GiB and 8 GiB) with
the fake nvidia-cuda-mps-control, driven by the fake kubelet (deviceplugin_kubelet.py).
The env of an Allocate response is applied to probe processes on the same fakegpu state,
with CUDA_VISIBLE_DEVICES set to the allocated GPU (what the container runtime does with
NVIDIA_VISIBLE_DEVICES):
  - libvgpu_probe sees its memory limit as free memory, gets exactly <memory / replicas>
    and is refused one byte more with CUDA_ERROR_OUT_OF_MEMORY; two clients of one GPU
    each get their own share; a process without the MPS env is not limited;
  - fakegpu_mps spin: a kernel of a client at 100 / replicas percent takes replicas
    times as long.
Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deviceplugin_kubelet as dk  # noqa: E402  (skips without grpc; fails under CI)
import deviceplugin_mps as dm  # noqa: E402

RESOURCE = dm.RESOURCE
MIB = 1 << 20


class MpsFakegpu(dm.MpsBase):
    def probe_env(self, alloc_env, uuid):
        """The container's view: the plugin's fakegpu state, the Allocate env, one GPU."""
        env = dict(self.plugin.env)
        env.update(alloc_env)
        env["CUDA_VISIBLE_DEVICES"] = uuid
        return env

    def probe(self, env, *args):
        path = os.path.join(dk.BUILD, "bin", "libvgpu_probe")
        return subprocess.run([path, "dlsym"] + list(args), env=env, capture_output=True,
                              text=True, timeout=60)

    @staticmethod
    def holder(env, size):
        """`libvgpu_probe dlsym hold SIZE`, running: its first line is "ready" (holding
        SIZE bytes) or "oom"."""
        return subprocess.Popen([os.path.join(dk.BUILD, "bin", "libvgpu_probe"), "dlsym",
                                 "hold", str(size)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def stop(proc):
        proc.kill()
        proc.wait()
        proc.stdout.close()

    def hold(self, env, size):
        """The first line of a holder, which is then stopped."""
        proc = self.holder(env, size)
        try:
            line = proc.stdout.readline().strip()
        finally:
            self.stop(proc)
        return line.split()[0] if line else line

    def allocate(self, device_id):
        resp = self.kubelet.allocate(RESOURCE, [device_id])
        return dict(resp.container_responses[0].envs)

    def test_client_held_to_its_share(self):
        self.start()
        devs = dk.wait_for(self.healthy, timeout=30, what="all replicas Healthy")
        ids = [d for d, _ in devs]
        by_gpu = {}
        for d in ids:
            by_gpu.setdefault(d.split("::")[0], []).append(d)
        self.assertEqual(len(by_gpu), 2)
        # The 8 GiB card: 4 replicas of 2048 MiB and 25 % each.
        info = {}
        for uuid in by_gpu:
            out = self.probe(self.probe_env({}, uuid), "info")
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            info[uuid] = int(re.search(r"devtotal=(\d+)", out.stdout).group(1))
        uuid = max(info, key=info.get)
        self.assertEqual(info[uuid], 8192 * MIB)
        share = info[uuid] // 4

        env_a = self.allocate(by_gpu[uuid][0])
        self.assertEqual(env_a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=%dM" % (share // MIB))
        self.assertEqual(env_a["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25")
        penv_a = self.probe_env(env_a, uuid)

        # The client sees what its limit allows as free memory, the card as total.
        out = self.probe(penv_a, "info")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("total=%d free=%d devtotal=%d uuid=%s" %
                      (info[uuid], share, info[uuid], uuid), out.stdout)
        # Its share fits, one byte more does not.
        self.assertEqual(self.hold(penv_a, share), "ready")
        self.assertEqual(self.hold(penv_a, share + 1), "oom")
        # Without the MPS env (a process bypassing MPS) the same allocation is granted.
        self.assertEqual(self.hold(self.probe_env({}, uuid), share + 1), "ready")

        # A second client of the same GPU, while the first holds its whole share: each is
        # held to its own limit, not to a sum.
        env_b = self.allocate(by_gpu[uuid][1])
        penv_b = self.probe_env(env_b, uuid)
        first = self.holder(penv_a, share)
        try:
            self.assertEqual(first.stdout.readline().strip(), "ready")
            self.assertEqual(self.hold(penv_b, share), "ready")
            self.assertEqual(self.hold(penv_b, share + 1), "oom")
        finally:
            self.stop(first)

        # The 4 GiB card's replicas: 1024 MiB each.
        small = min(info, key=info.get)
        env_c = self.allocate(by_gpu[small][0])
        penv_c = self.probe_env(env_c, small)
        self.assertEqual(self.hold(penv_c, 1024 * MIB), "ready")
        self.assertEqual(self.hold(penv_c, 1024 * MIB + 1), "oom")

        # Compute: a client at 25 % runs a 20 ms kernel in 80 ms of device time.
        spin = os.path.join(dk.BUILD, "tests", "fakegpu_mps")
        for env, want in ((penv_a, 80.0), (self.probe_env({}, uuid), 20.0)):
            out = subprocess.run([spin, "spin", "20"], env=env, capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            got = float(re.search(r"device_ms=([0-9.]+)", out.stdout).group(1))
            self.assertAlmostEqual(got, want, delta=0.01)


if __name__ == "__main__":
    dk.BUILD, dk.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dm.FAKE = os.path.abspath(sys.argv[3])
    dk.load_messages(os.path.join(dk.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    names = sys.argv[4:] or ["MpsFakegpu"]
    unittest.main(argv=[sys.argv[0]] + names, verbosity=2)
