#!/usr/bin/env bash
# Live resize inside one container (docs/libvgpu.md, "Live resize"):
# libvgpu_resize_test.sh BUILD_DIR CASE. As the device plugin mounts it, the container's
# limits directory is bound read-only at /etc/vgpu, here in a private mount namespace
# (root; otherwise it skips through vg_skip, which fails under CI), and
# libvgpu_resize.py plays the device plugin's part: it replaces the limits file by rename
# and raises the generation under running processes.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../lib/vg_skip.sh"
. "$HERE/../lib/fakegpu_tenants.sh"
vg_ns_reexec VGPU_RESIZE_TEST_NS "$@"
vg_tenants_init resize "$@"
vg_private_etc_vgpu
vg_fakegpu_env
unset CUDA_DEVICE_MEMORY_LIMIT CUDA_DEVICE_MEMORY_LIMIT_0 CUDA_DEVICE_MEMORY_SHARED_CACHE
mkdir -p "$T/ctr/etc"
python3 "$HERE/libvgpu_resize.py" "$B" "$T" "$CASE"
