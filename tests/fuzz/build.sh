#!/usr/bin/env bash
# Builds every fuzz target as a libFuzzer binary (clang, ASan+UBSan) into build-fuzz/.
# Run one: build-fuzz/tests/fuzz_<name> tests/fuzz/corpus/<name>/ -max_total_time=60
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang >/dev/null || { echo "make fuzz needs clang: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
CC=clang cmake -S . -B build-fuzz -DVGPU_LIBFUZZER=ON -DVGPU_SANITIZE=address \
    -DCMAKE_BUILD_TYPE=Debug >/dev/null
targets=$(cmake --build build-fuzz --target help | sed -n 's/^\.\.\. \(fuzz_[a-z0-9_]*\).*/\1/p')
cmake --build build-fuzz -j"$(nproc)" --target $targets
echo "built into build-fuzz/tests/:" $targets
