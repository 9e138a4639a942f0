"""vgpu-device-plugin's MIG mode and XID health against the fake kubelet of
deviceplugin_kubelet.py, on fakegpu with FAKEGPU_MIG set.

    /usr/bin/python3 deviceplugin_mig.py BUILD_DIR SOURCE_DIR [unittest names...]

Mig: migStrategy mixed and single register NVIDIA's resource names, list MIG UUIDs and
Allocate them; refusals (single with differing profiles) exit with NVIDIA's message.
Xid: `fakegpu-ctl xid` makes a GPU's devices (its MIG devices included) Unhealthy in
ListAndWatch; application XIDs and those in DP_DISABLE_HEALTHCHECKS change nothing.
HealthConfig: the config file's health section (ignoredXIDs, criticalXIDs, eventTypes,
disabled) decides the same; flags.restartOnDeviceUnhealthy restarts the plugin.
Skips when grpc is not importable (fails instead under CI: tests/lib/vg_skip.py).
"""
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deviceplugin_kubelet as dk  # noqa: E402  (skips without grpc; fails under CI)

H100 = "NVIDIA H100 80GB HBM3:81559MiB:132"
A100 = "NVIDIA A100-SXM4-40GB:40GiB:108"
MIXED = """version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
SINGLE = MIXED.replace("mixed", "single")


class Base(dk.Base):
    def start(self, config, devices, mig, extra=None, kubeconfig=None):
        env = {"FAKEGPU_DEVICES": devices, "FAKEGPU_MIG": mig,
               "VGPU_DP_HEALTH_INTERVAL_MS": "100"}
        env.update(extra or {})
        self.kubelet = dk.FakeKubelet(os.path.join(self.tmp, "kubelet"))
        self.plugin = dk.Plugin(self.tmp, config, extra_env=env, kubeconfig=kubeconfig)

    def ctl(self, *args):
        return subprocess.run([os.path.join(dk.BUILD, "bin", "fakegpu-ctl")] + list(args),
                              env=self.plugin.env, capture_output=True, text=True, timeout=30)

    def resources(self, count):
        dk.wait_for(lambda: len(self.kubelet.registrations) >= count,
                    what="%d registrations" % count)
        return sorted(r.resource_name for _, r in self.kubelet.registrations)

    def migs(self):
        """fakegpu's MIG devices: {gpu index: [(profile, uuid)]}."""
        out = {}
        gpu = None
        for line in self.ctl("status").stdout.splitlines():
            f = line.split()
            if line.startswith("  mig"):
                out.setdefault(gpu, []).append((f[2], f[3]))
            else:
                gpu = int(f[0])
        return out

    def health(self, resource):
        devs = self.kubelet.latest(resource)
        return dict(devs) if devs else None

    def poll_marker(self, gpu, while_lost, restored, what):
        """A positive signal that the plugin has polled health since everything injected
        so far, instead of a sleep that proves nothing when the plugin was not scheduled:
        GPU `gpu` is lost in fakegpu, then found again. Every health poll drains the
        pending XID events before it checks any GPU, so the ListAndWatch update that shows
        the marker GPU Unhealthy comes from a poll that saw every earlier event; that update
        must satisfy while_lost (the state the earlier events must have left), the one
        after the marker is back restored."""
        self.assertEqual(self.ctl("health", str(gpu), "off").returncode, 0)
        dk.wait_for(while_lost, what=what + " (GPU %d lost as the marker)" % gpu)
        self.assertEqual(self.ctl("health", str(gpu), "on").returncode, 0)
        dk.wait_for(restored, what="GPU %d found again after the marker" % gpu)


class Mig(Base):
    def test_mixed(self):
        self.start(MIXED, H100 + "," + A100, "0:1g.10gb,1g.10gb,3g.40gb")
        self.assertEqual(self.resources(3), ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
                                             "nvidia.com/mig-3g.40gb"])
        eps = {r.resource_name: r.endpoint for _, r in self.kubelet.registrations}
        self.assertEqual(eps["nvidia.com/mig-1g.10gb"], "nvidia-mig-1g.10gb.sock")
        migs = self.migs()[0]
        small = dk.wait_for(lambda: self.health("nvidia.com/mig-1g.10gb"), what="list")
        self.assertEqual(sorted(small), sorted(u for p, u in migs if p == "1g.10gb"))
        self.assertTrue(all(h == "Healthy" for h in small.values()))
        big = dk.wait_for(lambda: self.health("nvidia.com/mig-3g.40gb"), what="list")
        self.assertEqual(list(big), [u for p, u in migs if p == "3g.40gb"])
        # The non-MIG A100 stays nvidia.com/gpu (two time-slicing replicas).
        gpus = dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        self.assertEqual(len(gpus), 2)
        self.assertTrue(all("::" in d and d.startswith("GPU-") for d in gpus))

        ids = sorted(small)
        resp = self.kubelet.allocate("nvidia.com/mig-1g.10gb", ids)
        env = dict(resp.container_responses[0].envs)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], ",".join(ids))
        with self.assertRaises(dk.grpc.RpcError) as cm:
            self.kubelet.allocate("nvidia.com/mig-1g.10gb", list(big))
        self.assertIn("unknown device ID", cm.exception.details())
        pref = self.kubelet.preferred("nvidia.com/mig-1g.10gb", ids, 1)
        self.assertEqual(len(pref), 1)
        self.assertIn(pref[0], ids)

    def test_single(self):
        # The driver's capability table, as a MIG-enabled driver publishes it.
        minors = os.path.join(self.tmp, "mig-minors")
        with open(minors, "w") as f:
            f.write("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
                    "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"
                    "gpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\n")
        config = SINGLE.replace("  migStrategy: single\n",
                                "  migStrategy: single\n  plugin:\n    passDeviceSpecs: true\n")
        self.start(config, H100 + "," + H100, "0:2g.20gb,2g.20gb;1:2g.20gb",
                   {"VGPU_DP_MIG_MINORS": minors})
        self.assertEqual(self.resources(1), ["nvidia.com/gpu"])
        devs = dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        migs = self.migs()
        self.assertEqual(sorted(devs), sorted(u for m in migs.values() for _, u in m))
        resp = self.kubelet.allocate("nvidia.com/gpu", [migs[1][0][1], migs[0][1][1]])
        env = dict(resp.container_responses[0].envs)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], migs[1][0][1] + "," + migs[0][1][1])
        specs = sorted(d.container_path for d in resp.container_responses[0].devices)
        self.assertEqual(specs, sorted(["/dev/nvidiactl", "/dev/nvidia-uvm",
                                        "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1"] +
                                       ["/dev/nvidia-caps/nvidia-cap%d" % n
                                        for n in (21, 22, 147, 148)]))

    def test_driver_cap_table(self):
        # The table as the driver writes it: every possible GPU (32), GPU instance (15) and
        # compute instance (8), about 107 KiB. Read whole, not cut at 64 KiB mid-line.
        lines, minor = ["config 1", "monitor 2"], 3
        for gpu in range(32):
            for gi in range(15):
                lines.append("gpu%d/gi%d/access %d" % (gpu, gi, minor))
                minor += 1
                for ci in range(8):
                    lines.append("gpu%d/gi%d/ci%d/access %d" % (gpu, gi, ci, minor))
                    minor += 1
        minors = os.path.join(self.tmp, "mig-minors")
        with open(minors, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.assertGreater(os.path.getsize(minors), 100 * 1024)
        config = SINGLE.replace("  migStrategy: single\n",
                                "  migStrategy: single\n  plugin:\n    passDeviceSpecs: true\n")
        self.start(config, H100 + "," + H100, "0:2g.20gb,2g.20gb;1:2g.20gb",
                   {"VGPU_DP_MIG_MINORS": minors})
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        migs = self.migs()
        resp = self.kubelet.allocate("nvidia.com/gpu", [migs[1][0][1]])
        specs = [d.container_path for d in resp.container_responses[0].devices]
        self.assertIn("/dev/nvidia-caps/nvidia-cap147", specs)
        self.assertIn("/dev/nvidia-caps/nvidia-cap148", specs)

    def test_oversized_cap_table(self):
        # Past DP_MIG_MINORS_MAX_BYTES (1 MiB) the table is not read: the plugin says why
        # and serves the MIG devices without capability devices, as without a table.
        minors = os.path.join(self.tmp, "mig-minors")
        with open(minors, "w") as f:
            f.write("gpu0/gi1/access 12\n" * 60000)
        config = SINGLE.replace("  migStrategy: single\n",
                                "  migStrategy: single\n  plugin:\n    passDeviceSpecs: true\n")
        self.start(config, H100, "0:2g.20gb", {"VGPU_DP_MIG_MINORS": minors})
        devs = dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        self.assertIn("no MIG capability table", self.plugin.output())
        self.assertIn("larger than 1048576 bytes", self.plugin.output())
        resp = self.kubelet.allocate("nvidia.com/gpu", list(devs)[:1])
        specs = [d.container_path for d in resp.container_responses[0].devices]
        self.assertFalse([p for p in specs if p.startswith("/dev/nvidia-caps/")], specs)

    def test_bad_cap_table(self):
        minors = os.path.join(self.tmp, "mig-minors")
        with open(minors, "w") as f:
            f.write("gpu0/gi1/access twelve\n")
        self.start(MIXED, H100, "0:1g.10gb", {"VGPU_DP_MIG_MINORS": minors})
        self.assertEqual(self.plugin.proc.wait(20), 1)
        self.assertIn("mig-minors: line 1", self.plugin.output())
        self.plugin = None

    def test_single_refused(self):
        # NVIDIA's rules for single: one MIG profile on the node, every GPU in MIG mode.
        for devices, mig, msg in [(H100, "0:1g.10gb,2g.20gb", "more than one MIG device type"),
                                  (H100 + "," + H100, "0:1g.10gb", "same migEnabled value")]:
            self.start(SINGLE, devices, mig)
            self.assertEqual(self.plugin.proc.wait(20), 1)
            self.assertIn(msg, self.plugin.output())
            self.plugin = None
            self.kubelet.stop()
            self.kubelet = None
            for name in os.listdir(self.tmp):
                if name not in ("kubelet",):
                    subprocess.run(["rm", "-rf", os.path.join(self.tmp, name)])

    def test_vgpu_mode_mixed(self):
        # vgpu mode does not split MIG GPUs: only the A100 is in nvidia.com/gpu and in the
        # inventory the scheduler places on.
        self.api = dk.ApiServer(self.tmp)
        self.start("version: v1\nflags:\n  migStrategy: mixed\nvgpu:\n  deviceSplitCount: 3\n",
                   H100 + "," + A100, "0:7g.80gb", kubeconfig=self.api.kubeconfig)
        self.assertEqual(self.resources(2), ["nvidia.com/gpu", "nvidia.com/mig-7g.80gb"])
        gpus = dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        a100 = self.ctl("status").stdout.splitlines()[-1].split()[1]
        self.assertEqual(sorted(gpus), ["%s-%d" % (a100, i) for i in range(3)])
        inv = dk.wait_for(lambda: self.api.request("GET", "/api/v1/nodes/node-1")["metadata"]
                          .get("annotations", {}).get("vgpu.io/gpus"), what="inventory")
        self.assertEqual([g["uuid"] for g in dk.json.loads(inv)["gpus"]], [a100])
        mig = dk.wait_for(lambda: self.health("nvidia.com/mig-7g.80gb"), what="list")
        resp = self.kubelet.allocate("nvidia.com/mig-7g.80gb", list(mig))
        self.assertEqual(dict(resp.container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"],
                         list(mig)[0])


class Xid(Base):
    def test_mig_follows_gpu(self):
        self.start(MIXED, H100 + "," + A100, "0:1g.10gb,3g.40gb")
        self.resources(3)
        for r in ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu"):
            dk.wait_for(lambda: self.health(r), what="list of " + r)

        def all_health(want_mig, want_gpu):
            h = [self.health(r) for r in ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb")]
            g = self.health("nvidia.com/gpu")
            return (all(v == want_mig for d in h for v in d.values()) and
                    all(v == want_gpu for v in g.values()))

        # An application XID (13: graphics engine exception) is not the GPU's fault.
        self.assertEqual(self.ctl("xid", "0", "13").returncode, 0)
        dk.wait_for(lambda: "XID event ignored" in self.plugin.output(), what="XID 13 seen")
        self.poll_marker(1, lambda: all_health("Healthy", "Unhealthy"),
                         lambda: all_health("Healthy", "Healthy"),
                         "GPU 0's MIG devices Healthy after XID 13")
        # XID 48 (double-bit ECC) on GPU 0: both its MIG devices, nothing else.
        self.assertEqual(self.ctl("xid", "0", "48").returncode, 0)
        dk.wait_for(lambda: all_health("Unhealthy", "Healthy"), what="MIG devices Unhealthy")
        self.assertIn("xid=48", self.plugin.output())
        # And the A100's replicas on XID 79 (fallen off the bus).
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        dk.wait_for(lambda: all_health("Unhealthy", "Unhealthy"), what="GPU 1 Unhealthy")

    def test_disable_healthchecks(self):
        config = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n" \
                 "    - name: nvidia.com/gpu\n      replicas: 2\n"
        self.start(config, H100 + "," + H100, "", {"DP_DISABLE_HEALTHCHECKS": "79, 94"})
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        gpu1 = self.ctl("status").stdout.splitlines()[1].split()[1]
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        dk.wait_for(lambda: "xid=79" in self.plugin.output(), what="XID 79 seen")
        gpu0 = self.ctl("status").stdout.splitlines()[0].split()[1]

        def unhealthy(*uuids):
            """Exactly the replicas of these GPUs Unhealthy."""
            h = self.health("nvidia.com/gpu")
            return h is not None and all((v == "Unhealthy") == d.startswith(uuids)
                                         for d, v in h.items())
        self.poll_marker(0, lambda: unhealthy(gpu0 + "::"), lambda: unhealthy(),
                         "GPU 1 Healthy after XID 79")
        self.assertEqual(self.ctl("xid", "1", "31").returncode, 0)  # default-ignored
        self.assertEqual(self.ctl("xid", "1", "62").returncode, 0)  # critical
        devs = dk.wait_for(lambda: (lambda h: h if "Unhealthy" in h.values() else None)(
            self.health("nvidia.com/gpu")), what="Unhealthy after XID 62")
        self.assertEqual(sorted(d for d, v in devs.items() if v == "Unhealthy"),
                         [gpu1 + "::0", gpu1 + "::1"])
        # Like NVIDIA's plugin, an XID-failed GPU stays Unhealthy (until a restart): still
        # so in the polls that lose and find GPU 0 again.
        self.poll_marker(0, lambda: unhealthy(gpu0 + "::", gpu1 + "::"),
                         lambda: unhealthy(gpu1 + "::"), "GPU 1 still Unhealthy")
        self.assertEqual(sum(v == "Unhealthy" for v in self.health("nvidia.com/gpu").values()), 2)

    def test_bad_value(self):
        self.plugin = dk.Plugin(self.tmp, MIXED, extra_env={"DP_DISABLE_HEALTHCHECKS": "48;79"})
        self.assertEqual(self.plugin.proc.wait(20), 2)
        self.assertIn("DP_DISABLE_HEALTHCHECKS", self.plugin.output())
        self.plugin = None


TS2 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n" \
      "    - name: nvidia.com/gpu\n      replicas: 2\n"


class HealthConfig(Base):
    """The config file's health section, as NVIDIA's plugin reads it: ignoredXIDs,
    criticalXIDs, eventTypes, disabled."""

    def gpu_health(self):
        """{GPU index: set of its replicas' health}."""
        h = self.health("nvidia.com/gpu") or {}
        uuids = [line.split()[1] for line in self.ctl("status").stdout.splitlines()]
        return {i: {v for d, v in h.items() if d.startswith(u + "::")}
                for i, u in enumerate(uuids)}

    def settle(self, healthy_gpu):
        """GPU healthy_gpu stays Healthy through a health poll after everything injected
        so far (the other GPU, lost and found again, is the marker)."""
        marker = 1 - healthy_gpu
        self.poll_marker(marker, lambda: self.gpu_health() == {healthy_gpu: {"Healthy"},
                                                               marker: {"Unhealthy"}},
                         lambda: self.gpu_health() == {0: {"Healthy"}, 1: {"Healthy"}},
                         "GPU %d Healthy" % healthy_gpu)

    def test_ignored_xids(self):
        self.start(TS2 + "health:\n  ignoredXIDs: [48]\n", H100 + "," + H100, "")
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        self.assertEqual(self.ctl("xid", "0", "48").returncode, 0)
        dk.wait_for(lambda: "xid=48" in self.plugin.output(), what="XID 48 seen")
        self.settle(0)
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        dk.wait_for(lambda: self.gpu_health() == {0: {"Healthy"}, 1: {"Unhealthy"}},
                    what="GPU 1 Unhealthy after XID 79, GPU 0 Healthy")

    def test_critical_xids(self):
        self.start(TS2 + "health:\n  criticalXIDs: [79]\n", H100 + "," + H100, "")
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        self.assertEqual(self.ctl("xid", "0", "48").returncode, 0)  # not in the list
        dk.wait_for(lambda: "xid=48" in self.plugin.output(), what="XID 48 seen")
        self.settle(0)
        self.assertEqual(self.ctl("xid", "0", "79").returncode, 0)
        dk.wait_for(lambda: self.gpu_health() == {0: {"Unhealthy"}, 1: {"Healthy"}},
                    what="GPU 0 Unhealthy after XID 79")

    def test_event_types_without_xids(self):
        self.start(TS2 + "health:\n  eventTypes: [EventTypeDoubleBitEccError]\n",
                   H100 + "," + H100, "")
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        # fakegpu reports XIDs only: the plugin says so, and registers nothing.
        self.assertIn("does not report every watched event type", self.plugin.output())
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        self.settle(1)
        self.assertNotIn("xid=79", self.plugin.output())

    def test_restart_on_device_unhealthy(self):
        config = TS2.replace("version: v1\n", "version: v1\nflags:\n"
                             "  restartOnDeviceUnhealthy: true\n")
        self.start(config, H100 + "," + H100, "")
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        pid = self.plugin.proc.pid
        lists = len(self.kubelet.lists["nvidia.com/gpu"])
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        dk.wait_for(lambda: len(self.kubelet.registrations) >= 2, what="registration again")
        self.assertIn("restarting the plugin (flags.restartOnDeviceUnhealthy)",
                      self.plugin.output())
        # The same process, started afresh: the XID mark is gone, both GPUs Healthy.
        self.assertIsNone(self.plugin.proc.poll())
        self.assertEqual(self.plugin.proc.pid, pid)
        dk.wait_for(lambda: len(self.kubelet.lists["nvidia.com/gpu"]) > lists and
                    self.gpu_health() == {0: {"Healthy"}, 1: {"Healthy"}},
                    what="ListAndWatch after the restart, both GPUs Healthy")

    def test_disabled(self):
        self.start(TS2 + "health:\n  disabled: true\n", H100 + "," + H100, "")
        self.resources(1)
        dk.wait_for(lambda: self.health("nvidia.com/gpu"), what="list")
        self.assertEqual(self.ctl("xid", "1", "79").returncode, 0)
        self.assertEqual(self.ctl("health", "0", "off").returncode, 0)  # GPU 0 lost
        # No poll looks at anything, so no marker can show one ran: instead, the plugin
        # answers a call once its health timer (100 ms) was due, and then a second call.
        # One libevent loop serves the timer and the calls, and a timer due when the
        # first call is read runs in that turn of the loop at the latest, so by the second
        # answer a poll has run since the faults and sent whatever it found first.
        ids = sorted(self.health("nvidia.com/gpu"))
        time.sleep(0.3)  # until the timer is due: the answers below are the signal
        for _ in range(2):
            self.assertEqual(len(self.kubelet.preferred("nvidia.com/gpu", ids, 1)), 1)
        self.assertEqual(self.gpu_health(), {0: {"Healthy"}, 1: {"Healthy"}})
        self.assertNotIn("GPU unhealthy", self.plugin.output())


if __name__ == "__main__":
    dk.BUILD, dk.SOURCE = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dk.load_messages(os.path.join(dk.BUILD, "gen", "grpc", "kubelet", "api.desc"))
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
