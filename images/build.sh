#!/bin/bash
# Builds vgpu's container images from Debian packages alone (docs/images.md).
#
#   images/build.sh BUILD_DIR OUT_DIR VERSION [IMAGE...]   build OCI archives
#   images/build.sh --plan BUILD_DIR [IMAGE...]            print what each image holds
#
# For each images/<name>.image recipe: the files it names (build outputs, and single files
# of Debian packages), the Debian packages that own every library those files load
# (ldd, then dpkg -S: the package list is derived, never written down), a root extracted
# from those packages by mmdebstrap (nothing else: no shell, no dpkg, no apt, no docs but
# the copyright files), then one reproducible layer and an OCI image made with umoci,
# written as an OCI archive OUT_DIR/<name>.tar tagged localhost/<name>:VERSION.
#
# Environment: VGPU_IMAGE_MIRRORS (apt source lines, one per line; default: the
# bookworm, bookworm-updates and bookworm-security suites of deb.debian.org),
# VGPU_IMAGE_SUITE (bookworm), SOURCE_DATE_EPOCH (default: the last commit's time),
# VGPU_IMAGE_RECIPES (the directory of the recipes; default: images/).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
recipes=${VGPU_IMAGE_RECIPES:-$here}
die() {
    echo "images/build.sh: $*" >&2
    exit 1
}

plan_only=0
if [ "${1:-}" = --plan ]; then
    plan_only=1
    shift
    [ $# -ge 1 ] || die "usage: images/build.sh --plan BUILD_DIR [IMAGE...]"
    build=$1
    shift
else
    [ $# -ge 3 ] || die "usage: images/build.sh BUILD_DIR OUT_DIR VERSION [IMAGE...]"
    build=$1 out=$2 version=$3
    shift 3
fi
[ -d "$build" ] || die "no build directory $build (run make first)"
build=$(cd "$build" && pwd)

images=("$@")
if [ ${#images[@]} -eq 0 ]; then
    for r in "$recipes"/*.image; do
        images+=("$(basename "$r" .image)")
    done
fi

suite=${VGPU_IMAGE_SUITE:-bookworm}
mirrors=${VGPU_IMAGE_MIRRORS:-"deb http://deb.debian.org/debian $suite main
deb http://deb.debian.org/debian $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main"}

# owners PATH...: "PATH PACKAGE" for every PATH, from dpkg's file lists in one pass
# (dpkg -S per path is far slower). Merged /usr means a library found as /lib/x/libc.so.6
# may be listed as /usr/lib/x/libc.so.6 or the other way round, and a symlink under its
# own name or its target's; a path no package ships gets "PATH -".
owners() {
    /usr/bin/python3 - "$@" <<'EOF'
import glob, os, sys

def variants(p):
    for c in (p, os.path.realpath(p)):
        yield c
        yield c[4:] if c.startswith("/usr/") else "/usr" + c

want = {v for p in sys.argv[1:] for v in variants(p)}
found = {}
for lst in sorted(glob.glob("/var/lib/dpkg/info/*.list")):
    pkg = os.path.basename(lst)[: -len(".list")].split(":")[0]
    with open(lst, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line in want:
                found.setdefault(line, pkg)
for p in sys.argv[1:]:
    print(p, next((found[v] for v in variants(p) if v in found), "-"))
EOF
}

# libs FILE: the absolute paths of every library FILE loads (transitively), from ldd.
libs() {
    local f=$1 text
    text=$(ldd "$f" 2>&1) || {
        case $text in
        *"not a dynamic executable"* | *"statically linked"*) return 0 ;;
        esac
        die "ldd $f: $text"
    }
    if printf '%s\n' "$text" | grep -q 'not found'; then
        die "$f: libraries not found on this machine: $(printf '%s\n' "$text" | grep 'not found' | tr -s ' \t' ' ')"
    fi
    # a library found through a relative LD_LIBRARY_PATH entry is printed relative
    printf '%s\n' "$text" | awk '$2 == "=>" && $3 != "" { print $3 } $1 ~ /^\// { print $1 }' |
        while read -r l; do realpath -s "$l"; done
}

is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# parse RECIPE: fills files (SRC|DEST|MODE), hosts, user, entrypoint, cmds, labels
parse() {
    local recipe=$1 line kw rest n=0
    files=() hosts=() user= entrypoint= cmds=() labels=()
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        line=${line%%#*}
        line=$(printf '%s' "$line" | sed 's/[[:space:]]*$//')
        [ -n "$line" ] || continue
        kw=${line%% *}
        rest=${line#"$kw"}
        rest=${rest# }
        case $kw in
        file | file\?)
            set -- $rest
            [ $# -ge 2 ] && [ $# -le 3 ] || die "$recipe:$n: file SRC DEST [MODE]"
            case $2 in /*) ;; *) die "$recipe:$n: DEST must be absolute: $2" ;; esac
            if [ -e "$build/$1" ]; then
                files+=("$build/$1|$2|${3:-0755}")
            elif [ "$kw" = file ]; then
                die "$recipe:$n: $build/$1 is not built"
            fi
            ;;
        host)
            case $rest in /*) ;; *) die "$recipe:$n: host PATH must be absolute: $rest" ;; esac
            [ -e "$rest" ] || die "$recipe:$n: $rest is not on this machine"
            hosts+=("$rest")
            ;;
        user) user=$rest ;;
        entrypoint) entrypoint=$rest ;;
        cmd) cmds+=("$rest") ;;
        label) labels+=("$rest") ;;
        *) die "$recipe:$n: unknown keyword '$kw'" ;;
        esac
    done <"$recipe"
    [ -n "$user" ] || die "$recipe: no user line"
    [ ${#files[@]} -gt 0 ] || die "$recipe: no files"
}

# recipe_paths: the libraries the recipe's files and host files load, and the host files.
recipe_paths() {
    local f
    for f in "${files[@]%%|*}" "${hosts[@]}"; do
        if [ -n "${LIBS[$f]+set}" ]; then
            printf '%s' "${LIBS[$f]}"
        elif is_elf "$f"; then
            libs "$f" || exit 1
        fi
    done
    printf '%s\n' "${hosts[@]}"
}

# Owners of every path of every image, looked up once (dpkg's file lists are read in one
# pass for all of them): OWN[path] = package.
declare -A OWN LIBS
lookup_all() {
    local name all=() line f
    for name in "${images[@]}"; do
        [ -f "$recipes/$name.image" ] || die "no recipe $recipes/$name.image"
        parse "$recipes/$name.image"
        for f in "${files[@]%%|*}" "${hosts[@]}"; do
            [ -z "${LIBS[$f]+set}" ] || continue
            LIBS[$f]=
            if is_elf "$f"; then
                LIBS[$f]=$(libs "$f") || exit 1
                LIBS[$f]+=$'\n'
            fi
        done
        all+=($(recipe_paths)) || exit 1
    done
    while read -r line; do
        OWN[${line% *}]=${line##* }
    done < <(owners $(printf '%s\n' "${all[@]}" | sort -u))
}

# packages: the sorted Debian packages owning the host files and every library the
# recipe's files and the host files load; dies naming a library no package ships.
packages() {
    local p bad=
    local paths=($(recipe_paths | sort -u))
    for p in "${paths[@]}"; do
        [ "${OWN[$p]:--}" != - ] || bad="$bad $p"
    done
    [ -z "$bad" ] || die "no Debian package ships$bad (loaded by a file of the recipe)"
    for p in "${paths[@]}"; do echo "${OWN[$p]}"; done | sort -u
}

lookup_all

if [ $plan_only = 1 ]; then
    for name in "${images[@]}"; do
        recipe=$recipes/$name.image
        [ -f "$recipe" ] || die "no recipe $recipe"
        parse "$recipe"
        pk=$(packages)
        [ -n "$pk" ] || die "$name: no packages derived"
        echo "$name: user $user"
        for f in "${files[@]}"; do
            IFS='|' read -r src dest mode <<<"$f"
            echo "  file $dest ($mode) from ${src#"$build"/}"
        done
        for f in "${hosts[@]}"; do echo "  host $f (${OWN[$f]})"; done
        echo "  packages: $(echo $pk)"
    done
    exit 0
fi

command -v mmdebstrap >/dev/null || die "mmdebstrap missing (make images-deps)"
command -v umoci >/dev/null || die "umoci missing (make images-deps)"
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap extracts packages with their owners)"

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/work
rm -rf "$work"
cache=$work/cache
skip_update=
mkdir -p "$work" "$cache/lists" "$cache/archives"
trap 'rm -rf "$work"' EXIT

# Paths of extracted packages that no vgpu binary needs.
prune() {
    local root=$1
    rm -rf "$root"/dev/* "$root"/var "$root"/run "$root"/etc/apt "$root"/etc/dpkg \
        "$root"/etc/resolv.conf "$root"/etc/hostname "$root"/etc/fstab \
        "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale \
        "$root"/usr/share/lintian "$root"/usr/share/bug "$root"/usr/share/bash-completion \
        "$root"/usr/share/zsh "$root"/usr/share/menu "$root"/usr/share/gcc \
        "$root"/usr/lib/x86_64-linux-gnu/gconv "$root"/usr/share/i18n
    # docs: only the copyright files stay (the libraries' licences ask for them)
    if [ -d "$root/usr/share/doc" ]; then
        find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
        find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    fi
    # executables: only the ones the recipe names (packages like coreutils bring many)
    local keep d f
    for d in usr/bin usr/sbin; do
        [ -d "$root/$d" ] || continue
        for f in "$root/$d"/*; do
            [ -e "$f" ] || [ -L "$f" ] || continue
            keep=0
            for k in "${keep_exec[@]}"; do
                [ "/$d/$(basename "$f")" = "$k" ] && keep=1
            done
            [ $keep = 1 ] || rm -f "$f"
        done
    done
    find "$root/usr/share" -mindepth 1 -type d -empty -delete 2>/dev/null || true
}

for name in "${images[@]}"; do
    recipe=$recipes/$name.image
    [ -f "$recipe" ] || die "no recipe $recipe"
    parse "$recipe"
    t0=$SECONDS
    pk=$(packages)
    echo "== $name: $(echo $pk)"
    root=$work/$name/root
    mkdir -p "$root"
    # extract only: no maintainer scripts run, nothing of dpkg/apt is left to remove
    # but its empty databases; the merged-/usr hook gives bookworm's /bin -> usr/bin.
    # The package lists and the .deb files of one image are handed to the next (cache).
    debs=$work/$name/debs
    mmdebstrap --quiet --variant=extract --mode=root --format=directory \
        --setup-hook=/usr/share/mmdebstrap/hooks/merged-usr/setup00.sh \
        --setup-hook="mkdir -p \"\$1/var/lib/apt/lists\" \"\$1/var/cache/apt/archives\" && cp -al '$cache/lists/.' \"\$1/var/lib/apt/lists/\" && cp -al '$cache/archives/.' \"\$1/var/cache/apt/archives/\"" \
        --extract-hook="printf '%s\\n' \$MMDEBSTRAP_ESSENTIAL > '$debs'" \
        --skip=cleanup/apt/cache --skip=cleanup/apt/lists $skip_update \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --include="$(echo $pk | tr ' ' ',')" \
        "$suite" "$root" - <<<"$mirrors" ||
        die "$name: mmdebstrap failed"
    # hard links: apt replaces files by renaming, so neither side changes the other's
    if [ -z "$skip_update" ]; then
        cp -al "$root/var/lib/apt/lists/." "$cache/lists/"
        skip_update=--skip=update # the lists just fetched serve every later image
    fi
    find "$root/var/cache/apt/archives" -maxdepth 1 -name '*.deb' -exec cp -lf -t "$cache/archives" {} +
    echo "   packages extracted ($((SECONDS - t0)) s)"
    # what the image holds: the extracted packages, by name and version
    while read -r deb; do
        [ -n "$deb" ] || continue
        dpkg-deb -f "$root/$deb" Package Version | paste -sd' ' | sed 's/^Package: //; s/ Version: / /'
    done <"$debs" | sort >"$out/$name.packages"
    [ -s "$out/$name.packages" ] || die "$name: no packages extracted"

    # usr/bin paths of the host files and the image's own files, which stay
    keep_exec=()
    for f in "${hosts[@]}"; do
        case $f in /usr/*) keep_exec+=("$f") ;; *) keep_exec+=("/usr$f") ;; esac
        [ -e "$root$f" ] || die "$name: $f is not in the extracted packages"
    done
    for f in "${files[@]}"; do
        IFS='|' read -r src dest mode <<<"$f"
        keep_exec+=("$dest")
    done
    prune "$root"

    for f in "${files[@]}"; do
        IFS='|' read -r src dest mode <<<"$f"
        install -D -m "$mode" "$src" "$root$dest"
    done
    # users: root and nonroot (65532, as distroless images), no login shells
    mkdir -p "$root/etc" "$root/tmp" "$root/home/nonroot"
    chmod 1777 "$root/tmp"
    chown 65532:65532 "$root/home/nonroot"
    printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
    printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
    ldconfig -r "$root"
    rm -rf "$root/var/cache/ldconfig"
    # every path the same time, for a layer that does not change unless its files do
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

    layer=$work/$name/layer.tar
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --numeric-owner --xattrs \
        --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
        -C "$root" -cf "$layer" .

    layout=$work/$name/oci
    umoci init --layout "$layout"
    umoci new --image "$layout:$version"
    umoci raw add-layer --image "$layout:$version" \
        --history.created "$created" --history.created_by "images/build.sh $name" "$layer"
    cfg=(--created "$created" --author vgpu --config.user "$user" --config.workingdir /
        --config.env PATH=/usr/sbin:/usr/bin:/sbin:/bin
        --config.label "org.opencontainers.image.version=$version"
        --config.label "org.opencontainers.image.title=$name")
    for l in "${labels[@]}"; do cfg+=(--config.label "$l"); done
    if [ -n "$entrypoint" ]; then
        for a in $entrypoint; do cfg+=(--config.entrypoint "$a"); done
    fi
    for c in "${cmds[@]}"; do
        set -- $c
        if [ -x "$root$1" ]; then
            for a in $c; do cfg+=(--config.cmd "$a"); done
            break
        fi
    done
    umoci config --image "$layout:$version" --history.created "$created" \
        --history.created_by "images/build.sh $name" "${cfg[@]}"
    umoci gc --layout "$layout"
    # the full name in the index, which podman load and ctr images import both read
    python3 - "$layout/index.json" "localhost/$name:$version" <<'EOF'
import json, sys
path, ref = sys.argv[1], sys.argv[2]
with open(path) as f:
    index = json.load(f)
for m in index["manifests"]:
    ann = m.setdefault("annotations", {})
    ann["org.opencontainers.image.ref.name"] = ref
    ann["io.containerd.image.name"] = ref
with open(path, "w") as f:
    json.dump(index, f, separators=(",", ":"))
EOF
    find "$layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w \
        -C "$layout" -cf "$out/$name.tar.new" .
    mv -f "$out/$name.tar.new" "$out/$name.tar"
    echo "   $out/$name.tar ($(du -k "$out/$name.tar" | cut -f1) KiB, localhost/$name:$version, $((SECONDS - t0)) s)"
done
