#!/usr/bin/env python3
"""Every system file the build uses comes from a package the Makefile installs.

`make test` and `make demo` must work on a bare Debian bookworm machine with nothing but
what the Makefile's DEBIAN_PACKAGES pulls in. A header or pkg-config module that happens
to be installed on a developer's machine builds fine there and breaks for every new
user, so this test walks what the build actually used:

  - every header in the compilers' dependency files (*.o.d) outside the source and
    build trees,
  - every pkg-config module named by pkg_check_modules (its .pc file),
  - every program and library CMake found (FILEPATH entries in CMakeCache.txt),

finds the package owning each (`dpkg -S`), and checks that package is one the Makefile
lists or one of their installed dependencies (Depends and Pre-Depends, alternatives and
virtual packages resolved against what is installed).

Files under an OPTIONAL_DIR are exempt: the build uses them only when they exist (the
CUDA toolkit's cuda.h, which checks src/abi/cuda.h when a toolkit is installed).

usage: debian_deps.py SOURCE_DIR BUILD_DIR [OPTIONAL_DIR...]
"""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import vg_skip  # noqa: E402


def makefile_packages(src):
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", src, "print-packages"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def installed_graph():
    """Installed packages -> their dependency alternatives, and virtual -> providers."""
    fmt = "${Package}\t${Status}\t${Provides}\t${Depends}, ${Pre-Depends}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True,
                         check=True).stdout
    deps, provides = {}, {}
    for line in out.splitlines():
        name, status, prov, dep = (line.split("\t") + ["", "", ""])[:4]
        if not status.endswith("installed") or "not-installed" in status:
            continue
        alts = []
        for clause in dep.split(","):
            names = [re.sub(r"[\s(\[].*$", "", a.strip()).split(":")[0]
                     for a in clause.split("|")]
            names = [n for n in names if n]
            if names:
                alts.append(names)
        deps[name] = alts
        for p in prov.split(","):
            p = re.sub(r"[\s(].*$", "", p.strip())
            if p:
                provides.setdefault(p, set()).add(name)
    return deps, provides


def closure(roots, deps, provides):
    seen, todo = set(), list(roots)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        for alts in deps.get(pkg, []):
            for alt in alts:
                targets = ([alt] if alt in deps else []) + sorted(provides.get(alt, ()))
                if targets:
                    todo.extend(targets)
                    break
    return seen


def used_files(src, build, optional):
    src, build = os.path.realpath(src), os.path.realpath(build)
    skip = [src + "/", build + "/"] + [os.path.realpath(d) + "/" for d in optional]
    files = {}  # path -> why it is used
    for root, _, names in os.walk(build):
        for n in names:
            if not n.endswith(".o.d"):
                continue
            with open(os.path.join(root, n), encoding="utf-8", errors="replace") as f:
                for tok in f.read().replace("\\\n", " ").split():
                    if tok.startswith("/") and not tok.endswith(":"):
                        real = os.path.realpath(tok)
                        if not any(real.startswith(d) or tok.startswith(d) for d in skip):
                            files.setdefault(tok, "header")
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
        cache = f.read()
    for m in re.finditer(r"^__pkg_config_arguments_\w+:INTERNAL=(.*)$", cache, re.M):
        for mod in m.group(1).split(";"):
            if mod in ("REQUIRED", "QUIET", "IMPORTED_TARGET", "GLOBAL", "NO_CMAKE_PATH",
                       "NO_CMAKE_ENVIRONMENT_PATH") or not mod:
                continue
            mod = re.split(r"[<>=]", mod)[0].strip()
            r = subprocess.run(["pkg-config", "--path", mod], capture_output=True, text=True)
            if r.returncode != 0:
                files[f"<pkg-config module {mod}>"] = "missing"
            else:
                files.setdefault(r.stdout.strip(), f"pkg-config module {mod}")
    for m in re.finditer(r"^(\w+):FILEPATH=(/\S+)$", cache, re.M):
        if os.path.exists(m.group(2)):
            files.setdefault(m.group(2), f"CMake's {m.group(1)}")
    return files


def owners(paths):
    """path -> owning package, trying the path, its real path and the pre-/usr-merge name."""
    result, todo = {}, {}
    for p in paths:
        real = os.path.realpath(p)
        cands = [p, real]
        for c in (p, real):
            if c.startswith("/usr/lib/") or c.startswith("/usr/bin/") or c.startswith("/usr/sbin/"):
                cands.append(c[len("/usr"):])
        todo[p] = list(dict.fromkeys(cands))
    queries = sorted({c for cs in todo.values() for c in cs})
    owner_of = {}
    for i in range(0, len(queries), 200):
        r = subprocess.run(["dpkg", "-S"] + queries[i:i + 200], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            pkgs, _, path = line.partition(": ")
            if path in queries:
                owner_of[path] = [q.split(":")[0].strip() for q in pkgs.split(",")]
    for p, cands in todo.items():
        for c in cands:
            if c in owner_of:
                result[p] = owner_of[c]
                break
    return result


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    src, build, optional = sys.argv[1], sys.argv[2], [d for d in sys.argv[3:] if d]
    if subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode:
        vg_skip.skip("dpkg-query (not a Debian machine)")
    # DEBIAN_DEPS_DROP=pkg,...: check as if the Makefile did not list these (the
    # test that proves this check fails when a package is missing).
    listed = makefile_packages(src) - set(os.environ.get("DEBIAN_DEPS_DROP", "").split(","))
    deps, provides = installed_graph()
    # kubernetes-client: the Makefile counts it present when another package (Google's
    # kubectl, say, which owns the same file) already put kubectl on PATH.
    missing_listed = sorted(p for p in listed if p not in deps and not (
        p == "kubernetes-client" and shutil.which("kubectl")))
    allowed = closure([p for p in listed if p in deps], deps, provides)
    files = used_files(src, build, optional)
    own = owners([p for p, why in files.items() if why != "missing"])
    bad, unlisted = [], {}
    for path, why in sorted(files.items()):
        if why == "missing":
            bad.append(f"{path}: not found by pkg-config")
        elif path not in own:
            bad.append(f"{path} ({why}): no Debian package owns it")
        elif not set(own[path]) & allowed:
            unlisted.setdefault(", ".join(own[path]), []).append(f"{path} ({why})")
    for pkg, uses in sorted(unlisted.items()):
        more = f" and {len(uses) - 3} more" if len(uses) > 3 else ""
        bad.append(f"{pkg}, which DEBIAN_PACKAGES neither lists nor depends on, owns "
                   f"{'; '.join(uses[:3])}{more}")
    if missing_listed:
        bad.append("listed in the Makefile but not installed: " + " ".join(missing_listed))
    if bad:
        print("the build uses files that a fresh machine would not have:")
        print("\n".join("  " + b for b in bad))
        print("add the owning package to DEBIAN_PACKAGES in the Makefile")
        return 1
    n_pkgs = len({p for ps in own.values() for p in ps})
    print(f"{len(files)} system files from {n_pkgs} packages, all installed by the Makefile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
