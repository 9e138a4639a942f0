#!/usr/bin/env python3
"""Live resize in running processes: libvgpu_resize.py BUILD_DIR T CASE, run by
libvgpu_resize_test.sh in a private mount namespace with /etc/vgpu free to bind.

The container's limits directory is T/ctr/etc, bound read-only at /etc/vgpu as the device
plugin mounts it. NodeWriter does what vgpu-device-plugin does for a resize
(dp_container_limits_update): a complete new limits file renamed over the old one, then
the generation raised in place. Processes are libvgpu_resize_watch under LD_PRELOAD of
libvgpu, driven one command per line."""
import mmap
import os
import struct
import subprocess
import sys
import time

B, T, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
MiB, GiB = 1 << 20, 1 << 30
CONTEXT_MIB = 16  # what each process's context costs (fakegpu and libvgpu alike)
os.environ["FAKEGPU_CONTEXT_MIB"] = str(CONTEXT_MIB)
ETC = os.path.join(T, "ctr", "etc")
REGION = os.path.join(T, "ctr", "region")
WATCH = os.path.join(B, "bin", "libvgpu_resize_watch")
LIB = os.path.join(B, "lib", "libvgpu.so")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


class NodeWriter:
    """The device plugin's side: limits file by rename, then the generation."""

    def __init__(self, mib, cores=0):
        self.gen = 0
        self.write_limits(mib, 0, cores=cores)
        with open(os.path.join(ETC, "generation"), "wb") as f:
            f.write(b"vgpugen1" + struct.pack("<Q", 0))
        subprocess.run(["mount", "--bind", ETC, "/etc/vgpu"], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", "/etc/vgpu"], check=True)

    def write_limits(self, mib, gen, text=None, cores=0):
        if text is None:
            text = "# written by vgpu-device-plugin for pod t/p, container main\nvgpu-limits 1\n"
            if gen > 0:
                text += "VGPU_LIMITS_GENERATION=%d\n" % gen
            if cores:
                text += "CUDA_DEVICE_SM_LIMIT_0=%d\nVGPU_COMPUTE_BOARD=%s/board\n" % (cores, T)
            text += ("CUDA_DEVICE_MEMORY_LIMIT_0=%dm\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n"
                     "VGPU_CONTEXT_MIB=%d\n" % (mib, REGION, CONTEXT_MIB))
        tmp = os.path.join(ETC, "limits.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o444)
        os.rename(tmp, os.path.join(ETC, "limits"))

    def raise_generation(self, gen):
        with open(os.path.join(ETC, "generation"), "r+b") as f:
            m = mmap.mmap(f.fileno(), 16)
            m[8:16] = struct.pack("<Q", gen)
            m.close()
        self.gen = gen

    def resize(self, mib, text=None, cores=0):
        """Returns CLOCK_MONOTONIC ns just after the generation was raised."""
        gen = self.gen + 1
        self.write_limits(mib, gen, text, cores)
        self.raise_generation(gen)
        return time.monotonic_ns()


class Proc:
    def __init__(self, env_extra=None):
        env = dict(os.environ, LD_PRELOAD=LIB)
        env.update(env_extra or {})
        self.p = subprocess.Popen([WATCH], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            fail("watcher did not start: %r %s" % (line, self.p.stdout.read()))

    def cmd(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def total(self):
        return int(self.cmd("info").split()[0].split("=")[1])

    def wait_total(self, total, ms=3000):
        out = self.cmd("wait %d %d" % (total, ms))
        if not out.startswith("applied"):
            fail("limit %d MiB not seen: %s" % (total // MiB, out))
        return int(out.split("=")[1])

    def close(self):
        self.p.stdin.close()
        self.p.wait(10)
        self.p.stdout.close()


def want(proc, command, answer, why):
    got = proc.cmd(command)
    if got != answer:
        fail("%s: %s answered %r, want %r" % (why, command, got, answer))


def case_grow():
    node = NodeWriter(1024)
    p = Proc()
    if p.total() != GiB:
        fail("starts at 1 GiB, saw %d" % p.total())
    want(p, "alloc %d" % (512 * MiB), "ok", "half the limit")
    want(p, "alloc %d" % GiB, "oom", "past 1 GiB before the resize")
    t0 = node.resize(2048)
    t1 = p.wait_total(2 * GiB)
    # Seen on the next query of the same running process, without a restart.
    if t1 - t0 > 1_000_000_000:
        fail("applied %.3f s after the generation was raised" % ((t1 - t0) / 1e9))
    want(p, "alloc %d" % GiB, "ok", "1 GiB more under the new 2 GiB limit")
    want(p, "alloc %d" % (600 * MiB), "oom", "past the new limit")
    p.close()


def case_lower_holds():
    node = NodeWriter(2048)
    p, q = Proc(), Proc()
    want(p, "alloc %d" % (1536 * MiB), "ok", "1.5 GiB of 2 GiB")
    node.resize(1024)
    p.wait_total(GiB)
    q.wait_total(GiB)
    # Lowering frees nothing: the process keeps what it holds; new allocations are refused
    # while the container holds more than the new limit, by another process too, and a new
    # process cannot even make its context.
    r = subprocess.run([WATCH], env=dict(os.environ, LD_PRELOAD=LIB), input="", text=True,
                       capture_output=True, timeout=30)
    if "error CUDA setup" not in r.stdout:
        fail("a new process got a context above the lowered limit: %s" % r.stdout)
    want(q, "alloc %d" % MiB, "oom", "another process while usage is above the new limit")
    want(p, "alloc %d" % MiB, "oom", "the holder while usage is above the new limit")
    want(p, "freeall", "ok", "free")
    want(q, "alloc %d" % (512 * MiB), "ok", "below the new limit again")
    want(q, "alloc %d" % (512 * MiB), "oom", "past the new 1 GiB (the contexts count too)")
    p.close()
    q.close()


def case_every_process():
    node = NodeWriter(1024)
    procs = [Proc() for _ in range(6)]
    worst = 0
    for size in (3072, 512, 2048):
        t0 = node.resize(size)
        for p in procs:
            worst = max(worst, p.wait_total(size * MiB) - t0)
    if worst > 1_000_000_000:
        fail("slowest process applied %.3f s after the generation" % (worst / 1e9))
    print("every process applied within %.1f ms" % (worst / 1e6))
    for p in procs:
        p.close()


def case_unusable():
    node = NodeWriter(1024)
    p = Proc()
    want(p, "alloc %d" % (256 * MiB), "ok", "before")
    # A file that cannot be used closes enforcement until a good one comes: never "no limit".
    node.resize(0, text="vgpu-limits 1\nCUDA_DEVICE_MEMORY_LIMIT_0=lots\n")
    deadline = time.time() + 3
    while p.cmd("alloc %d" % MiB) != "oom":
        if time.time() > deadline:
            fail("allocations still granted under an unusable limits file")
    node.resize(2048)
    p.wait_total(2 * GiB)
    want(p, "alloc %d" % GiB, "ok", "a good file again")
    p.close()


def case_env_cannot_raise():
    """A tenant after a resize: its environment and a file of its own name a larger
    limit, and it tries to rewrite the mounted limits; the resized limit holds."""
    node = NodeWriter(1024)
    forged = os.path.join(T, "forged")
    with open(forged, "w") as f:
        f.write("vgpu-limits 1\nVGPU_LIMITS_GENERATION=99\nCUDA_DEVICE_MEMORY_LIMIT_0=8g\n")
    env = {"CUDA_DEVICE_MEMORY_LIMIT_0": "8g", "CUDA_DEVICE_MEMORY_LIMIT": "8g",
           "VGPU_LIMITS_FILE": forged}
    p = Proc(env)
    node.resize(1536)
    p.wait_total(1536 * MiB)
    q = Proc(env)
    if q.total() != 1536 * MiB:
        fail("a tenant's environment moved the resized limit: %d" % q.total())
    want(q, "alloc %d" % (1536 * MiB), "oom", "past the resized limit")
    for path in ("/etc/vgpu/limits", "/etc/vgpu/generation"):
        try:
            with open(path, "r+b") as f:
                f.write(b"x")
            fail("%s is writable in the container" % path)
        except OSError:
            pass
    p.close()
    q.close()


def case_compute():
    """A running tenant's compute share, 30 % then resized to 70 %: fakegpu's timeline
    (libvgpu_compute_truth) sees each within 5 points, in 500 ms windows away from the
    change (a timing test: CTest runs it serially)."""
    node = NodeWriter(4096, cores=30)
    env = dict(os.environ, LD_PRELOAD=LIB)
    tenant = subprocess.Popen([os.path.join(B, "bin", "compute_tenant"), "1000000", "5500"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    truth = subprocess.Popen([os.path.join(B, "bin", "libvgpu_compute_truth"), "steps", "0",
                              "500", "10", str(tenant.pid)], stdout=subprocess.PIPE, text=True)
    time.sleep(2.5)
    node.resize(4096, cores=70)
    steps = truth.communicate(timeout=60)[0].split("\n")
    out = tenant.communicate(timeout=60)[0]
    if tenant.returncode != 0:
        fail("tenant: %s" % out)
    share = {int(l.split()[0][2:]): float(l.split()[1].split("=")[1]) for l in steps if l}
    before = [share[t] for t in (1000, 1500, 2000)]
    after = [share[t] for t in (3500, 4000, 4500, 5000)]
    mb, ma = sum(before) / len(before), sum(after) / len(after)
    print("compute share before %.1f %%, after %.1f %% (steps %s)" % (mb, ma, share))
    if abs(mb - 30) > 5 or abs(ma - 70) > 5:
        fail("share %.1f %% before (want 30 +- 5), %.1f %% after (want 70 +- 5)" % (mb, ma))


CASES = {"compute": case_compute, "grow": case_grow, "lower_holds": case_lower_holds, "every_process": case_every_process,
         "unusable": case_unusable, "env_cannot_raise": case_env_cannot_raise}
CASES[CASE]()
print("ok " + CASE)
