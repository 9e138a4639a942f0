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


class Container:
    """A container on the device plugin's compute board (board_layout: the plugin's own
    code): its limits directory bound read-only at /etc/vgpu in its own mount namespace, its
    slot file made by dp_board_create; resize does what dp_container_limits_update does, in
    its order: the limits file by rename, the share on the board
    (board_layout --share: dp_board_share_set), then the generation."""

    def __init__(self, name, cores, uuid, mode="hard"):
        self.name, self.uuid, self.gen, self.mode = name, uuid, 0, mode
        self.etc = os.path.join(T, name, "etc")
        os.makedirs(self.etc)
        self.write(cores)
        with open(os.path.join(self.etc, "generation"), "wb") as f:
            f.write(b"vgpugen1" + struct.pack("<Q", 0))
        board_layout(name, cores)

    def write(self, cores):
        text = "vgpu-limits 1\n"
        if self.gen > 0:
            text += "VGPU_LIMITS_GENERATION=%d\n" % self.gen
        text += ("CUDA_DEVICE_SM_LIMIT_0=%d\nVGPU_COMPUTE_MODE=%s\nVGPU_COMPUTE_BOARD=%s/board\n"
                 "CUDA_DEVICE_MEMORY_LIMIT_0=4096m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=%s\n"
                 "VGPU_CONTEXT_MIB=%d\n" % (cores, self.mode, T, os.path.join(T, self.name, "region"),
                                            CONTEXT_MIB))
        tmp = os.path.join(self.etc, "limits.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o444)
        os.rename(tmp, os.path.join(self.etc, "limits"))

    def start(self, ms):
        script = ('mount --bind "$0" /etc/vgpu && mount -o remount,bind,ro /etc/vgpu && '
                  'exec env LD_PRELOAD="$1" "$2" 1000000 "$3"')
        env = dict(os.environ, VGPU_COMPUTE_SLOT="pod-%s_main" % self.name)
        self.p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                   script, self.etc, LIB,
                                   os.path.join(B, "bin", "compute_tenant"), str(ms)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        return self.p.pid

    def resize(self, cores):
        self.gen += 1
        self.write(cores)
        r = subprocess.run([os.path.join(B, "bin", "board_layout"), "--share",
                            os.path.join(T, "board"), self.uuid, "pod-" + self.name, "main",
                            str(cores)], capture_output=True, text=True)
        if r.returncode != 0:
            fail("board_layout --share: %s" % r.stderr)
        with open(os.path.join(self.etc, "generation"), "r+b") as f:
            m = mmap.mmap(f.fileno(), 16)
            m[8:16] = struct.pack("<Q", self.gen)
            m.close()

    def finish(self):
        out = self.p.communicate(timeout=60)[0]
        if self.p.returncode != 0:
            fail("tenant %s: %s" % (self.name, out))


def board_uuid():
    """The GPU's UUID as libvgpu names its board file (a throwaway run with a board)."""
    probe = os.path.join(T, "probe")
    env = dict(os.environ, LD_PRELOAD=LIB, CUDA_DEVICE_SM_LIMIT="50", VGPU_COMPUTE_BOARD=probe,
               CUDA_DEVICE_MEMORY_SHARED_CACHE=os.path.join(T, "region.probe"))
    subprocess.run([os.path.join(B, "bin", "compute_tenant"), "1000", "20"], env=env,
                   capture_output=True, check=True, timeout=30)
    boards = [f for f in os.listdir(probe) if f.endswith(".board")]
    if len(boards) != 1:
        fail("probe made no board file: %s" % os.listdir(probe))
    return boards[0][:-len(".board")]


def board_layout(name, cores):
    os.makedirs(os.path.join(T, "board"), exist_ok=True)
    r = subprocess.run([os.path.join(B, "bin", "board_layout"), os.path.join(T, "board"), UUID,
                        "pod-" + name, "main", str(cores)], capture_output=True, text=True)
    if r.returncode != 0:
        fail("board_layout: %s" % r.stderr)


def board_run(before, resize, modes=("hard", "hard"), shares=None):
    """board_once, run again (once) when the two containers did not keep the GPU at least
    90 % busy after the resize: saturating tenants starved of CPU by other load on the
    machine say nothing about the split (what they leave idle is no container's share)."""
    global T
    top = T
    for attempt in (1, 2):
        T = os.path.join(top, "run%d" % attempt)
        os.makedirs(T)
        after = board_once(before, resize, modes, shares)
        if sum(after) >= 90:
            return after
        print("the GPU was %.1f %% busy after the resize (CPU starved?): once more" %
              sum(after))
    fail("the GPU was only %.1f %% busy after the resize, twice" % sum(after))


def board_once(before, resize, modes, shares):
    """Two saturating containers a (before[0] %) and b (before[1] %) on one GPU's board
    (modes: their VGPU_COMPUTE_MODE; shares: their limits when before is what they get),
    resized by resize (name -> share) 2.5 s in; fakegpu's per-process truth in 500 ms
    steps. The mean shares of the steps at 1..2 s and at 3.5..5 s (the first second after
    the resize left to settle: a board scan every 200 ms, credit windows of 20 ms)."""
    global UUID
    UUID = board_uuid()
    shares = shares or before
    ctr = {"a": Container("a", shares[0], UUID, modes[0]),
           "b": Container("b", shares[1], UUID, modes[1])}
    pids = [str(c.start(5500)) for c in ctr.values()]
    truth = subprocess.Popen([os.path.join(B, "bin", "libvgpu_compute_truth"), "steps", "0",
                              "500", "10"] + pids, stdout=subprocess.PIPE, text=True)
    time.sleep(2.5)
    for name, cores in resize.items():
        ctr[name].resize(cores)
    steps = [l for l in truth.communicate(timeout=60)[0].split("\n") if l]
    for c in ctr.values():
        c.finish()
    share = {int(l.split()[0][2:]): [float(f.split("=")[1]) for f in l.split()[1:]]
             for l in steps}
    mean = lambda ts, g: sum(share[t][g] for t in ts) / len(ts)
    got_before = [mean((1000, 1500, 2000), g) for g in (0, 1)]
    got_after = [mean((3500, 4000, 4500, 5000), g) for g in (0, 1)]
    print("shares before %s, after %s (steps %s)" % (got_before, got_after, share))
    for g in (0, 1):
        if abs(got_before[g] - before[g]) > 6:
            fail("container %s: %.1f %% before the resize, want %d +- 6" %
                 ("ab"[g], got_before[g], before[g]))
    return got_after


def case_board_pair():
    """30 % and 70 % on one GPU, resized to 50 % and 50 % while both saturate it: each
    within 6 points of 50 % from 1 s after the resize on (serial: a timing test)."""
    after = board_run((30, 70), {"a": 50, "b": 50})
    for g in (0, 1):
        if abs(after[g] - 50) > 6:
            fail("container %s: %.1f %% after the resize to 50 %%, want 50 +- 6" %
                 ("ab"[g], after[g]))


def case_board_over():
    """Only the 30 % container resized to 60 % beside the 70 % one (a sum vgpu-scheduler
    refuses; here written to the node directly): the GPU is not oversold, each container
    keeps at most its own share, and the two split it near evenly (each >= 40 %)
    (docs/compute.md "A resized share")."""
    after = board_run((30, 70), {"a": 60})
    if after[0] + after[1] > 101:
        fail("the board gave %.1f %% + %.1f %%" % (after[0], after[1]))
    if after[0] > 60 + 3 or after[1] > 70 + 3:
        fail("a container above its own share: %s" % after)
    if min(after) < 40:
        fail("shares beyond 100 %% split %s, not near evenly (each >= 40)" % after)


def case_board_burst():
    """A 30 % container beside a 40 % one in burst mode (which takes what its neighbours
    leave: 70 %); the 30 % one resized to 60 %: the burst container reads the new share on
    the board and leaves it 60 %, within 6 points, from 1 s after the resize on. With the
    share the slot file was made with (30 %), the burst container would go on taking 70 %."""
    after = board_run((30, 70), {"a": 60}, modes=("hard", "burst"), shares=(30, 40))
    if abs(after[0] - 60) > 6 or abs(after[1] - 40) > 6:
        fail("after the resize to 60 %%: %.1f %% and %.1f %%, want 60 and 40 +- 6" %
             (after[0], after[1]))


CASES = {"compute": case_compute, "board_pair": case_board_pair, "board_over": case_board_over,
         "board_burst": case_board_burst, "grow": case_grow, "lower_holds": case_lower_holds, "every_process": case_every_process,
         "unusable": case_unusable, "env_cannot_raise": case_env_cannot_raise}
CASES[CASE]()
print("ok " + CASE)
