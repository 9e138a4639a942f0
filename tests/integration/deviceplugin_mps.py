"""vgpu-device-plugin in MPS mode against the fake kubelet of deviceplugin_kubelet.py.

    /usr/bin/python3 deviceplugin_mps.py BUILD_DIR SOURCE_DIR FAKE_MPS_CONTROL [names...]

The plugin runs on fakegpu's NVML (2 GPUs) with vgpu.mpsControlPath pointing at the fake
nvidia-cuda-mps-control (tests/integration/fake_mps_control.c), which logs every command
it receives to <log dir>/control.log. Checked: one daemon per GPU started with its UUID
and the per-GPU defaults, replicas Healthy only once the daemons answer, Allocate's env
and mounts, a killed daemon turning its GPU's replicas Unhealthy and back once restarted,
no daemon left after the plugin stops; bad MPS configurations exit 2.
`Bench` (bench/deviceplugin_mps.sh) prints start and restart times instead.
Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""
import os
import signal
import statistics
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deviceplugin_kubelet as dk  # noqa: E402  (skips without grpc; fails under CI)

FAKE = None
RESOURCE = "nvidia.com/gpu"
MPS = """version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def gone(pid, timeout=10.0):
    """No such process, or a zombie (its parent, not us, reaps it)."""
    end = time.time() + timeout
    while time.time() < end:
        stat = read("/proc/%d/stat" % pid)
        if not stat or stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


class MpsBase(dk.Base):
    def start(self, config=MPS, interval="100"):
        self.root = os.path.join(self.tmp, "mps")
        self.kubelet = dk.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.t0 = time.time()
        self.plugin = dk.Plugin(self.tmp, config,
                                extra_env={"VGPU_DP_HEALTH_INTERVAL_MS": interval},
                                args=["--mps-root", self.root, "--mps-control-path", FAKE])
        req = self.registered()
        self.assertEqual(req.resource_name, RESOURCE)
        return req

    def gpu_dir(self, uuid):
        return os.path.join(self.root, RESOURCE, uuid)

    def pid(self, uuid):
        text = read(os.path.join(self.gpu_dir(uuid), "pipe", "nvidia-cuda-mps-control.pid"))
        return int(text) if text.strip() else 0

    def healthy(self, want_unhealthy=()):
        """The latest list when every device of want_unhealthy GPUs is Unhealthy and all
        others Healthy, else None."""
        devs = self.kubelet.latest(RESOURCE)
        if not devs:
            return None
        ok = all((h == "Unhealthy") == (d.split("::")[0] in want_unhealthy) for d, h in devs)
        return devs if ok else None


class Mps(MpsBase):
    def test_daemons_allocate_restart_quit(self):
        self.start()
        devs = dk.wait_for(self.healthy, timeout=30, what="all replicas Healthy")
        self.assertEqual(len(devs), 8)
        ids = [d for d, _ in devs]
        uuids = sorted({d.split("::")[0] for d in ids})
        self.assertEqual(len(uuids), 2)

        # One daemon per GPU, started with its UUID and the per-GPU defaults.
        mem = {}
        for uuid in uuids:
            log = read(os.path.join(self.gpu_dir(uuid), "log", "control.log"))
            self.assertIn(" %s] start" % uuid, log)
            self.assertIn("cmd set_default_active_thread_percentage 25\n", log)
            self.assertIn("cmd get_default_active_thread_percentage\n", log)
            line = [l for l in log.splitlines() if "set_default_device_pinned_mem_limit" in l][0]
            mem[uuid] = line.split()[-1]
            self.assertTrue(self.pid(uuid) > 0)
        self.assertEqual(sorted(mem.values()), ["1024M", "2048M"])  # 4 GiB and 8 GiB / 4
        self.assertTrue(os.path.isdir(os.path.join(self.root, "shm")))

        # Allocate: env for the client, the GPU's pipe and log dirs and shm mounted.
        target = ids[5]
        uuid = target.split("::")[0]
        resp = self.kubelet.allocate(RESOURCE, [target])
        c = resp.container_responses[0]
        env = dict(c.envs)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], uuid)
        self.assertEqual(env["CUDA_MPS_PIPE_DIRECTORY"], "/mps/nvidia.com/gpu/pipe")
        self.assertEqual(env["CUDA_MPS_LOG_DIRECTORY"], "/mps/nvidia.com/gpu/log")
        self.assertEqual(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25")
        self.assertEqual(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=" + mem[uuid])
        mounts = {m.container_path: (m.host_path, m.read_only) for m in c.mounts}
        self.assertEqual(mounts["/mps/nvidia.com/gpu/pipe"],
                         (os.path.join(self.gpu_dir(uuid), "pipe"), False))
        self.assertEqual(mounts["/mps/nvidia.com/gpu/log"],
                         (os.path.join(self.gpu_dir(uuid), "log"), True))
        self.assertEqual(mounts["/dev/shm"], (os.path.join(self.root, "shm"), False))
        with self.assertRaises(dk.grpc.RpcError) as cm:  # failRequestsGreaterThanOne
            self.kubelet.allocate(RESOURCE, ids[:2])
        self.assertIn("maximum request size for shared resources is 1", cm.exception.details())

        # The daemon of one GPU is killed: its replicas go Unhealthy, the other GPU's stay
        # Healthy; it is restarted and they come back.
        victim = uuids[0]
        old = self.pid(victim)
        os.kill(old, signal.SIGKILL)
        dk.wait_for(lambda: self.healthy(want_unhealthy=(victim,)), timeout=30,
                    what="the killed daemon's replicas Unhealthy")
        dk.wait_for(self.healthy, timeout=30, what="Healthy again after the restart")
        self.assertNotEqual(self.pid(victim), old)
        self.assertTrue(gone(old))
        self.assertIn("MPS control daemon failed", self.plugin.output())
        resp = self.kubelet.allocate(RESOURCE, [ids[0]])
        self.assertIn("CUDA_MPS_PIPE_DIRECTORY", dict(resp.container_responses[0].envs))

        # Plugin stops: every daemon is told to quit and none is left.
        pids = [self.pid(u) for u in uuids]
        self.assertEqual(self.plugin.stop(), 0)
        for uuid, pid in zip(uuids, pids):
            self.assertTrue(gone(pid), "daemon %d of %s still running" % (pid, uuid))
            self.assertIn("cmd quit\n", read(os.path.join(self.gpu_dir(uuid), "log",
                                                          "control.log")))
            self.assertEqual(self.pid(uuid), 0)  # its pid file removed

    def test_several_replicas(self):
        """failRequestsGreaterThanOne: false: replicas of one GPU add up, two GPUs are
        refused, and the preferred allocation keeps a request on one GPU."""
        self.start(MPS.replace("  mps:\n", "  mps:\n    failRequestsGreaterThanOne: false\n"))
        devs = dk.wait_for(self.healthy, timeout=30, what="all replicas Healthy")
        ids = [d for d, _ in devs]
        a = [d for d in ids if d.startswith(ids[0].split("::")[0])]
        b = [d for d in ids if d not in a]
        interleaved = [x for pair in zip(a, b) for x in pair]
        pref = self.kubelet.preferred(RESOURCE, interleaved, 3)
        self.assertEqual(len(pref), 3)
        self.assertEqual(len({d.split("::")[0] for d in pref}), 1, pref)
        env = dict(self.kubelet.allocate(RESOURCE, a[:2]).container_responses[0].envs)
        self.assertEqual(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50")
        with self.assertRaises(dk.grpc.RpcError) as cm:
            self.kubelet.allocate(RESOURCE, [a[0], b[0]])
        self.assertIn("must all be on one GPU", cm.exception.details())

    def test_missing_control_program(self):
        self.root = os.path.join(self.tmp, "mps")
        self.kubelet = dk.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = dk.Plugin(self.tmp, MPS, extra_env={"VGPU_DP_HEALTH_INTERVAL_MS": "100"},
                                args=["--mps-root", self.root,
                                      "--mps-control-path", os.path.join(self.tmp, "nope")])
        self.registered()
        # The failure is logged with what `-d` said (here: the exec failure).
        dk.wait_for(lambda: "MPS control daemon failed" in self.plugin.output() and
                    "cannot execute the MPS control program" in self.plugin.output(),
                    what="failure logged")
        devs = dk.wait_for(lambda: self.kubelet.latest(RESOURCE), what="list")
        self.assertTrue(all(h == "Unhealthy" for _, h in devs))
        with self.assertRaises(dk.grpc.RpcError) as cm:
            self.kubelet.allocate(RESOURCE, [devs[0][0]])
        self.assertIn("MPS control daemon", cm.exception.details())
        self.assertIsNone(self.plugin.proc.poll())


class MpsBadConfig(dk.Base):
    def check(self, config, *words):
        self.plugin = dk.Plugin(self.tmp, config, args=["--mps-control-path", FAKE])
        self.assertEqual(self.plugin.proc.wait(20), 2)
        out = self.plugin.output()
        for w in words:
            self.assertIn(w, out)
        self.plugin = None

    def test_mps_root_not_a_directory(self):
        self.plugin = dk.Plugin(self.tmp, MPS, args=["--mps-control-path", FAKE,
                                                     "--mps-root", "/dev/null/mps"])
        self.assertEqual(self.plugin.proc.wait(20), 1)
        self.assertIn("mkdir /dev/null", self.plugin.output())
        self.plugin = None

    def test_missing_mps_root(self):
        self.check("version: v1\nflags:\n  mpsRoot: \"\"\n" + MPS.split("\n", 1)[1],
                   "flags.mpsRoot", "must be set when sharing.mps is used")

    def test_mixed_mig(self):
        self.check("version: v1\nflags:\n  migStrategy: mixed\n" + MPS.split("\n", 1)[1],
                   "cannot be combined with flags.migStrategy 'mixed'")

    def test_one_replica(self):
        self.check(MPS.replace("replicas: 4", "replicas: 1"), "sharing.mps.resources[0].replicas")

    def test_mig_device(self):
        self.check(MPS.replace("replicas: 4", "replicas: 4\n      devices: [\"0:0\"]"),
                   "MPS sharing is not supported on MIG devices")


class Bench(MpsBase):
    """Start time (plugin start to every replica Healthy) and restart time (SIGKILL of a
    daemon to its replicas Healthy again; includes the 1 s first backoff)."""

    def test_bench(self):
        rounds = int(os.environ.get("MPS_BENCH_ROUNDS", "10"))
        starts, restarts, detects = [], [], []
        for _ in range(3):
            self.start(interval="100")
            dk.wait_for(self.healthy, timeout=30, what="Healthy")
            starts.append(time.time() - self.t0)
            self.tearDown()
            self.setUp()
        self.start(interval="100")
        devs = dk.wait_for(self.healthy, timeout=30, what="Healthy")
        victim = devs[0][0].split("::")[0]
        for _ in range(rounds):
            old = self.pid(victim)
            t = time.time()
            os.kill(old, signal.SIGKILL)
            dk.wait_for(lambda: self.healthy(want_unhealthy=(victim,)), timeout=30,
                        what="Unhealthy", )
            detects.append(time.time() - t)
            dk.wait_for(self.healthy, timeout=30, what="Healthy")
            restarts.append(time.time() - t)
            time.sleep(0.3)
        ms = lambda v: "%.0f ms" % (v * 1000)  # noqa: E731
        print("\n| measure (MPS mode, fake control program) | result |")
        print("| --- | --- |")
        print("| mps start: plugin start to every replica Healthy (2 GPUs; 3 runs) | %s |" %
              ", ".join(ms(s) for s in starts))
        print("| mps daemon SIGKILL to its replicas Unhealthy (%d kills) | p50 %s, max %s |" %
              (rounds, ms(statistics.median(detects)), ms(max(detects))))
        print("| mps daemon SIGKILL to Healthy again (1 s first backoff) | p50 %s, max %s |" %
              (ms(statistics.median(restarts)), ms(max(restarts))))

if __name__ == "__main__":
    dk.BUILD, dk.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    FAKE = os.path.abspath(sys.argv[3])
    dk.load_messages(os.path.join(dk.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    names = sys.argv[4:] or ["Mps", "MpsBadConfig"]
    unittest.main(argv=[sys.argv[0]] + names, verbosity=2)
