"""Tests of the OCI archives `make images` writes (docs/images.md).

    /usr/bin/python3 images/test.py BUILD_DIR SOURCE_DIR IMAGES_DIR VERSION

File tree (always; umoci unpack): the image's name and tag, user, entrypoint, the files
of its recipe (libvgpu.so byte for byte), no shell, dpkg, apt or documentation but the
copyright files, and every ELF file's DT_NEEDED libraries found in the image itself
(readelf); as root also the image's own loader listing each binary's libraries (chroot)
and each binary's --help run in the image root. Size: each archive at most 60 MB.
Containers (podman, as the cluster's runtime would run them): each binary's --help; the
device plugin's init steps installing libvgpu.so into a host directory; the device plugin
against fakegpu and a fake kubelet (the integration tests' one) in a temporary directory
standing in for /var/lib/kubelet/device-plugins: registration, ListAndWatch, Allocate;
the monitor sampling fakegpu's NVML as user 65532. Where podman cannot run a container,
the test fails after the file-tree checks, saying why.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BYTES = 60 * 1000 * 1000
LIB_DIRS = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
            "/lib", "/usr/lib"]
# What deploy/ relies on: user, entrypoint and the binaries each image carries.
EXPECT = {
    "vgpu-scheduler": {"user": "65532:65532", "entrypoint": ["/usr/bin/vgpu-scheduler"],
                       "bins": ["/usr/bin/vgpu-scheduler"]},
    "vgpu-device-plugin": {"user": "0:0", "entrypoint": ["/usr/bin/vgpu-device-plugin"],
                           "bins": ["/usr/bin/vgpu-device-plugin", "/usr/bin/vgpu-dra-plugin"]},
    "vgpu-monitor": {"user": "65532:65532", "entrypoint": ["/usr/bin/vgpu-monitor"],
                     "bins": ["/usr/bin/vgpu-monitor"]},
    # and every other program its recipe adds (vgpu, once built)
    "vgpu-tools": {"user": "65532:65532", "entrypoint": None,
                   "bins": ["/usr/bin/vgpu-kubectl-lite", "/usr/bin/vgpu-sim",
                            "/usr/bin/fakegpu-ctl"]},
}
PODMAN_RUN = ["run", "--rm", "--runtime", "runc", "--network", "none",
              "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
# The security context of docs/images.md ("Users and capabilities"), as podman flags:
# every container runs with exactly these, so a capability or a writable root file system
# an image needs and the table does not grant fails here.
CONFINED = ["--cap-drop", "all", "--read-only", "--security-opt", "no-new-privileges"]
SECURITY = {
    "vgpu-scheduler": ["--user", "65532:65532"] + CONFINED,
    "vgpu-device-plugin": ["--user", "0:0"] + CONFINED,
    "vgpu-monitor": ["--user", "65532:65532"] + CONFINED,
    "vgpu-monitor-kill": ["--user", "0:0", "--pid", "host"] + CONFINED + ["--cap-add", "KILL"],
    "vgpu-tools": ["--user", "65532:65532"] + CONFINED,
}

failures = []


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what if not cond else what.splitlines()[0]),
          flush=True)
    if not cond:
        failures.append(what)
    return cond


def run(cmd, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.STDOUT)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run(cmd, **kw)


def recipe_files(name, build):
    """(dest, src or None) of the recipe's file lines whose source is built, and host lines."""
    out = []
    with open(os.path.join(HERE, name + ".image")) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] in ("file", "file?"):
                src = os.path.join(build, words[1])
                if os.path.exists(src):
                    out.append((words[2], src))
            elif words[0] == "host":
                out.append((words[1], None))
    return out


def inside(root, path, depth=0):
    """path resolved inside root (symlinks followed within it); None if missing."""
    if depth > 40:
        return None
    cur = root
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        nxt = os.path.join(cur, part)
        if os.path.islink(nxt):
            target = os.readlink(nxt)
            rest = "/".join(parts[i + 1:])
            if target.startswith("/"):
                base = target
            else:
                base = os.path.join("/" + os.path.relpath(cur, root), target)
            return inside(root, os.path.normpath(base + ("/" + rest if rest else "")), depth + 1)
        if not os.path.lexists(nxt):
            return None
        cur = nxt
    return cur


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def dynamic(path):
    """(needed, runpaths) from readelf -d."""
    out = run(["readelf", "-d", path]).stdout
    needed, runpaths = [], []
    for line in out.splitlines():
        if "(NEEDED)" in line:
            needed.append(line.split("[", 1)[1].split("]", 1)[0])
        elif "(RUNPATH)" in line or "(RPATH)" in line:
            runpaths += line.split("[", 1)[1].split("]", 1)[0].split(":")
    return needed, runpaths


def unresolved(root):
    """'file: lib' for every DT_NEEDED of every ELF file in root not found in root."""
    missing = []
    count = 0
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.islink(p) or not os.path.isfile(p) or not is_elf(p):
                continue
            count += 1
            rel = "/" + os.path.relpath(p, root)
            needed, runpaths = dynamic(p)
            dirs = [r.replace("$ORIGIN", os.path.dirname(rel)) for r in runpaths] + LIB_DIRS
            for lib in needed:
                if not any(inside(root, os.path.join(x, lib)) for x in dirs):
                    missing.append("%s: %s" % (rel, lib))
    return count, missing


def unpack(archive, work, name, version):
    layout = os.path.join(work, name + ".oci")
    os.makedirs(layout)
    with tarfile.open(archive) as t:
        t.extractall(layout)
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
            for m in index["manifests"]]
    ref = "localhost/%s:%s" % (name, version)
    check(refs == [ref], "%s: archive names %s (found %s)" % (name, ref, refs))
    bundle = os.path.join(work, name + ".bundle")
    args = ["umoci", "unpack", "--image", "%s:%s" % (layout, ref)]
    if os.geteuid() != 0:
        args.append("--rootless")
    r = run(args + [bundle])
    check(r.returncode == 0, "%s: umoci unpack (%s)" % (name, r.stdout.strip()[-300:]))
    with open(os.path.join(bundle, "config.json")) as f:
        rt = json.load(f)
    manifest_digest = index["manifests"][0]["digest"].split(":", 1)[1]
    with open(os.path.join(layout, "blobs", "sha256", manifest_digest)) as f:
        manifest = json.load(f)
    with open(os.path.join(layout, "blobs", "sha256",
                           manifest["config"]["digest"].split(":", 1)[1])) as f:
        config = json.load(f)
    return os.path.join(bundle, "rootfs"), config["config"], rt


def tree_checks(name, archive, build, work, version):
    exp = EXPECT[name]
    size = os.path.getsize(archive)
    check(size <= MAX_BYTES, "%s: archive %.1f MB <= 60 MB" % (name, size / 1e6))
    root, cfg, _ = unpack(archive, work, name, version)
    check(cfg.get("User") == exp["user"], "%s: user %s (found %s)" % (name, exp["user"], cfg.get("User")))
    check(cfg.get("Entrypoint") == exp["entrypoint"],
          "%s: entrypoint %s (found %s)" % (name, exp["entrypoint"], cfg.get("Entrypoint")))
    for dest, src in recipe_files(name, build):
        p = inside(root, dest)
        if not check(p is not None and os.access(p, os.X_OK), "%s: %s present, executable" % (name, dest)):
            continue
        if src is not None:
            with open(p, "rb") as a, open(src, "rb") as b:
                check(a.read() == b.read(), "%s: %s is %s" % (name, dest, os.path.relpath(src, build)))
    for b in exp["bins"]:
        check(inside(root, b) is not None, "%s: %s present" % (name, b))
    if name == "vgpu-device-plugin":
        check(inside(root, "/usr/lib/vgpu/libvgpu.so") is not None, "%s: /usr/lib/vgpu/libvgpu.so" % name)
    for absent in ("/bin/sh", "/usr/bin/bash", "/usr/bin/dpkg", "/usr/bin/apt", "/var/lib/dpkg",
                   "/var/lib/apt", "/etc/apt", "/usr/share/man", "/usr/share/locale"):
        check(inside(root, absent) is None, "%s: no %s" % (name, absent))
    docs = os.path.join(root, "usr/share/doc")
    extra = [os.path.join(d, n) for d, _, ns in os.walk(docs) for n in ns if n != "copyright"]
    check(not extra, "%s: only copyright files under /usr/share/doc (%s)" % (name, extra[:3]))
    with open(os.path.join(root, "etc/passwd")) as f:
        passwd = f.read()
    check("nonroot:x:65532:65532:" in passwd, "%s: /etc/passwd has nonroot (65532)" % name)
    count, missing = unresolved(root)
    check(count > 0 and not missing,
          "%s: every DT_NEEDED of its %d ELF files is in the image %s" % (name, count, missing[:5]))
    if os.geteuid() == 0:
        for b in exp["bins"]:
            r = run(["chroot", root, "/lib64/ld-linux-x86-64.so.2", "--list", b])
            check(r.returncode == 0 and "not found" not in r.stdout,
                  "%s: the image's loader resolves %s (chroot)" % (name, b))
            r = run(["chroot", "--userspec=" + exp["user"], root, b, "--help"])
            check(usage_printed(r.stdout) and r.returncode in (0, 2),
                  "%s: %s --help runs in the image root as %s (rc %d)"
                  % (name, b, exp["user"], r.returncode))
    # skopeo (what docs/images.md copies to a registry with) reads the archive
    if shutil.which("skopeo"):
        r = run(["skopeo", "inspect", "--config", "oci-archive:" + archive])
        ok = r.returncode == 0
        if ok:
            ok = json.loads(r.stdout)["config"].get("User") == exp["user"]
        check(ok, "%s: skopeo inspect oci-archive: reads it (%s)" % (name, r.stdout.strip()[-200:] if not ok else "user " + exp["user"]))
    # the package list matches what the recipe's binaries load, today
    plan = run([os.path.join(HERE, "build.sh"), "--plan", build, name])
    derived = []
    for line in plan.stdout.splitlines():
        if line.strip().startswith("packages:"):
            derived = line.split(":", 1)[1].split()
    with open(archive[: -len(".tar")] + ".packages") as f:
        listed = {line.split()[0] for line in f if line.strip()}
    check(derived and set(derived) <= listed,
          "%s: holds every package its binaries load (%s)" % (name, sorted(set(derived) - listed)))
    return root


def podman_works(podman):
    """None when podman runs containers here, else why not."""
    if not shutil.which("podman"):
        return "podman is not installed (make images-deps)"
    r = run(podman + ["info"])
    if r.returncode != 0:
        return "podman info failed: " + r.stdout.strip()[-300:]
    return None


def fake_kubelet_module(source, build):
    sys.path.insert(0, os.path.join(source, "tests", "integration"))
    import deviceplugin_kubelet as dk  # noqa: E402 (python3-grpcio)
    dk.BUILD, dk.SOURCE = build, source
    dk.load_messages(os.path.join(build, "gen", "grpc", "kubelet", "api.desc"))
    return dk


def container_checks(podman, images, build, source, work, version):
    for name in images:
        r = run(podman + ["load", "-i", images[name]])
        check(r.returncode == 0 and ("localhost/%s:%s" % (name, version)) in r.stdout,
              "%s: podman load (%s)" % (name, r.stdout.strip().splitlines()[-1:]))
    for name in images:
        ref = "localhost/%s:%s" % (name, version)
        for b in EXPECT[name]["bins"]:
            ep = [] if EXPECT[name]["entrypoint"] == [b] else ["--entrypoint", b]
            r = run(podman + PODMAN_RUN + SECURITY[name] + ep + [ref, "--help"])
            check(usage_printed(r.stdout) and r.returncode in (0, 2),
                  "%s: podman run %s --help (rc %d: %s)" % (name, b, r.returncode, r.stdout[:200]))

    # the device plugin image's init steps: libvgpu.so installed on the "host"
    ref = "localhost/vgpu-device-plugin:%s" % version
    host = os.path.join(work, "host")
    os.makedirs(os.path.join(host, "usr/local/vgpu"))
    with open(os.path.join(host, "usr/local/vgpu/libvgpu.so"), "w") as f:
        f.write("old library, still mapped by a running container\n")
    old = open(os.path.join(host, "usr/local/vgpu/libvgpu.so"))
    mount = SECURITY["vgpu-device-plugin"] + ["-v", "%s/usr/local/vgpu:/host/usr/local/vgpu" % host]
    r1 = run(podman + PODMAN_RUN + mount + ["--entrypoint", "/usr/bin/install", ref, "-D", "-m", "0755",
             "/usr/lib/vgpu/libvgpu.so", "/host/usr/local/vgpu/libvgpu.so.new"])
    r2 = run(podman + PODMAN_RUN + mount + ["--entrypoint", "/bin/mv", ref, "-f",
             "/host/usr/local/vgpu/libvgpu.so.new", "/host/usr/local/vgpu/libvgpu.so"])
    with open(os.path.join(host, "usr/local/vgpu/libvgpu.so"), "rb") as a, \
            open(os.path.join(build, "lib", "libvgpu.so"), "rb") as b:
        same = a.read() == b.read()
    check(r1.returncode == 0 and r2.returncode == 0 and same,
          "vgpu-device-plugin: init steps install libvgpu.so on the host (%s %s)"
          % (r1.stdout.strip(), r2.stdout.strip()))
    check(old.read().startswith("old library"),
          "vgpu-device-plugin: a process holding the old libvgpu.so keeps its file")
    old.close()

    # the device plugin against fakegpu and a fake kubelet
    try:
        dk = fake_kubelet_module(source, build)
    except SystemExit:
        check(False, "vgpu-device-plugin: python3-grpcio for the fake kubelet (run with /usr/bin/python3)")
        return
    tmp = os.path.join(work, "dp")
    for d in ("kubelet", "state", "containers", "board"):
        os.makedirs(os.path.join(tmp, d))
        os.chmod(os.path.join(tmp, d), 0o777)
    with open(os.path.join(tmp, "config.yaml"), "w") as f:
        f.write(dk.TIME_SLICING)
    kubelet = dk.FakeKubelet(os.path.join(tmp, "kubelet"))
    fake = os.path.join(build, "fakegpu")
    cname = "vgpu-dp-test-%d" % os.getpid()
    cmd = podman + PODMAN_RUN + SECURITY["vgpu-device-plugin"] + [
        "--name", cname,
        "-v", "%s:/var/lib/kubelet/device-plugins" % os.path.join(tmp, "kubelet"),
        "-v", "%s:/etc/vgpu-dp:ro" % tmp,
        "-v", "%s:/run/fakegpu" % os.path.join(tmp, "state"),
        "-v", "%s:/usr/local/vgpu/containers" % os.path.join(tmp, "containers"),
        "-v", "%s:/usr/local/vgpu/compute-board" % os.path.join(tmp, "board"),
        "-v", "%s:/opt/fakegpu:ro" % fake,
        "-e", "LD_LIBRARY_PATH=/opt/fakegpu", "-e", "FAKEGPU_DEVICES=" + dk.DEVICES,
        "-e", "FAKEGPU_STATE_DIR=/run/fakegpu", ref,
        "--node-name", "node-1", "--kubelet-dir", "/var/lib/kubelet/device-plugins",
        "--config", "/etc/vgpu-dp/config.yaml"]
    log = open(os.path.join(tmp, "plugin.log"), "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        req = dk.wait_for(lambda: kubelet.registrations and kubelet.registrations[0][1],
                          timeout=60, what="registration")
        check(req.resource_name == "nvidia.com/gpu.shared",
              "vgpu-device-plugin: the container registers with the kubelet (%s)" % req.resource_name)
        devs = dk.wait_for(lambda: kubelet.latest(req.resource_name), timeout=30, what="ListAndWatch")
        check(len(devs) == 8 and all(h == "Healthy" for _, h in devs),
              "vgpu-device-plugin: ListAndWatch lists fakegpu's 2 GPUs x 4 replicas, healthy")
        resp = kubelet.allocate(req.resource_name, [devs[0][0]])
        env = dict(resp.container_responses[0].envs)
        check(env.get("NVIDIA_VISIBLE_DEVICES") == devs[0][0].split("::")[0],
              "vgpu-device-plugin: Allocate answers NVIDIA_VISIBLE_DEVICES=%s" % env.get("NVIDIA_VISIBLE_DEVICES"))
    except Exception:  # a timeout: say what the plugin logged
        traceback.print_exc()
        log.flush()
        log.seek(0)
        check(False, "vgpu-device-plugin in a container against the fake kubelet:\n" + log.read()[-3000:])
    finally:
        run(podman + ["stop", "-t", "10", cname])
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        kubelet.stop()
    check(proc.returncode == 0, "vgpu-device-plugin: exits 0 on SIGTERM (rc %s)" % proc.returncode)

    # the monitor, as user 65532, sampling fakegpu's NVML
    ref = "localhost/vgpu-monitor:%s" % version
    for sec, policy in (("vgpu-monitor", "warn"), ("vgpu-monitor-kill", "kill")):
        state = os.path.join(work, "monitor-state-" + policy)  # fakegpu's, per user
        os.makedirs(state)
        os.chmod(state, 0o777)
        r = run(podman + PODMAN_RUN + SECURITY[sec] + [
            "-v", "%s:/run/fakegpu" % state, "-v", "%s:/opt/fakegpu:ro" % fake,
            "-v", "%s:/usr/local/vgpu/containers:ro" % os.path.join(tmp, "containers"),
            "-e", "FAKEGPU_DEVICES=" + dk.DEVICES, "-e", "FAKEGPU_STATE_DIR=/run/fakegpu", ref,
            "--nvml-library", "/opt/fakegpu/libnvidia-ml.so.1", "--samples", "3",
            "--interval-ms", "10", "--node-name", "node-1", "--policy", policy])
        check(r.returncode == 0 and "watching gpus=2 policy=" + policy in r.stdout,
              "vgpu-monitor: samples fakegpu's NVML, policy %s, as %s, exits 0 (rc %d: %s)"
              % (policy, SECURITY[sec][1], r.returncode, r.stdout.strip()[-500:]))


def usage_printed(out):
    """A line of out starts with "usage" (vgpu's help opens with a summary line first)."""
    return any(line.lower().startswith("usage") for line in out.splitlines())


def main():
    build, source, images_dir, version = [os.path.abspath(a) for a in sys.argv[1:4]] + [sys.argv[4]]
    tools = EXPECT["vgpu-tools"]["bins"]
    tools += [d for d, src in recipe_files("vgpu-tools", build)
              if src is not None and d.startswith("/usr/bin/") and d not in tools]
    images = {}
    for name in sorted(EXPECT):
        p = os.path.join(images_dir, name + ".tar")
        if check(os.path.exists(p), "%s: %s exists (make images)" % (name, p)):
            images[name] = p
    work = tempfile.mkdtemp(prefix="vgpu-images.")
    storage = os.path.join(work, "storage")
    podman = ["podman", "--root", os.path.join(storage, "root"), "--runroot",
              os.path.join(storage, "run"), "--storage-driver", "vfs",
              "--cgroup-manager", "cgroupfs", "--events-backend", "none"]
    t0 = time.time()
    try:
        for name, archive in images.items():
            tree_checks(name, archive, build, work, version)
        why = podman_works(podman)
        if why is None:
            container_checks(podman, images, build, source, work, version)
        else:
            # The images are for running: a machine where podman cannot run them has not
            # tested them, whatever their file trees look like.
            check(False, "podman cannot run the images on this machine (%s); only their "
                  "file trees were checked" % why)
    finally:
        if os.path.isdir(storage):
            run(podman + ["rm", "-a", "-f"])
            run(podman + ["system", "reset", "-f"])
        shutil.rmtree(work, ignore_errors=True)
    print("%d failure(s) in %.0f s" % (len(failures), time.time() - t0))
    for f in failures:
        print("  " + f.splitlines()[0])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
