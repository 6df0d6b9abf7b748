#!/usr/bin/env bash
# The cube crate's tests on a GPU host that has no Rust toolchain, from the test binaries that
# `cargo xtask device-bundle --tests` writes into .cache/device-tests/ (carried there on their
# own: docs/benchmarks.md, "On a machine without a toolchain"). From the repository's root:
#
#   crates/bench/peers/device-tests.sh OUT_DIR
#
# runs each binary on SWITCHYARD_CUBE_DEVICE (default cuda:0) into OUT_DIR/gpu-tests.txt and
# ends with one line per binary; exits 1 if any failed. Arguments after OUT_DIR go to every
# binary (a test name filter, --test-threads N). Each binary has LIMIT seconds (default 120):
# one that runs past it ends with rc 124 and the others still run.
set -uo pipefail

out=${1:?a folder for the results}
shift
here=$(cd "$(dirname "$0")" && pwd)
tests=.cache/device-tests
work=${TMPDIR:-/tmp}/switchyard-device-tests
ls "$tests"/*.xz >/dev/null 2>&1 || { echo "device-tests.sh: no test binaries in $tests: run cargo xtask device-bundle --tests first" >&2; exit 1; }
mkdir -p "$out" "$work"
export SWITCHYARD_CUBE_DEVICE=${SWITCHYARD_CUBE_DEVICE:-cuda:0}
log=$out/gpu-tests.txt
{
    date -u
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
    echo "SWITCHYARD_CUBE_DEVICE=$SWITCHYARD_CUBE_DEVICE"
    source "$here/cuda-libs.sh"
} >"$log" 2>&1
status=0
summary=()
# The kernel tests first (what llvmpipe cannot check), should the call run out of time.
order=()
for name in kernels conformance lib kernel_times; do [[ -e $tests/$name.xz ]] && order+=("$tests/$name.xz"); done
for packed in "$tests"/*.xz; do [[ " ${order[*]} " == *" $packed "* ]] || order+=("$packed"); done
for packed in "${order[@]}"; do
    name=$(basename "$packed" .xz)
    bin=$work/$name
    if command -v xz >/dev/null; then
        xz -dc "$packed" >"$bin"
    else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$packed" "$bin"
    fi
    chmod +x "$bin"
    echo "== $name" | tee -a "$log"
    # A limit per binary (LIMIT seconds, default 120), so one test that hangs on the device
    # (cuBLAS handed over on the device is new) leaves time for the other binaries.
    timeout "${LIMIT:-120}" "$bin" "$@" 2>&1 | tee "$work/$name.out"
    rc=${PIPESTATUS[0]}
    cat "$work/$name.out" >>"$log"
    [[ $rc == 0 ]] || status=1
    result=$(grep -E '^test result:' "$work/$name.out" | tail -1)
    summary+=("$name: ${result:-no result line} (rc $rc)")
done
printf '%s\n' "${summary[@]}" | tee -a "$log"
exit $status
