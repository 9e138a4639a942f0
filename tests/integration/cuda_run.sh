#!/bin/sh
# Runs one case of cuda_api with a fresh FAKEGPU_STATE_DIR (so cases run in parallel) and
# build/fakegpu first on LD_LIBRARY_PATH, as a user would.
#   cuda_run.sh FAKEGPU_DIR PROGRAM CASE [VAR=VALUE ...]
set -eu
fakegpu_dir=$1
program=$2
case_name=$3
shift 3
state_dir=$(mktemp -d "${TMPDIR:-/tmp}/fakegpu-test.XXXXXX")
trap 'rm -rf "$state_dir"' EXIT INT TERM
env FAKEGPU_STATE_DIR="$state_dir" LD_LIBRARY_PATH="$fakegpu_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$@" "$program" "$case_name"
