#!/usr/bin/env bash
# The benchmarks on a machine that has no Rust toolchain and no network, from the bundle that
# `cargo xtask device-bundle` writes into .cache/device/ (docs/benchmarks.md, "On a machine
# without a toolchain"). From the repository's root there:
#
#   crates/bench/peers/device.sh cpu|gpu|all OUT_DIR [THREADS]
#
# cpu: Switchyard flex (f32, bf16, int8; file order and sorted) and ONNX Runtime (fp32 and
#      int8, sorted by length) on both corpora at each thread count of THREADS (default
#      2,8,16), into OUT_DIR/runs-corpus.tsv and runs-corpus-128.tsv;
# gpu: each kernel's device time on three batches in the device's own dtype, and on the first
#      with attention in tiles and the tuned matmul (`kernel-times`, into gpu-kernels.txt, and
#      the CUDA C++ of every kernel they compiled into kernel-sources.log.xz);
#      `switchyard-bench --gpus-only` (into gpu-ours.txt); PyTorch on the same batches beside
#      it (gpu_peer.py, into gpu-peer.txt); cubek's matmul routines and the tuned matmul
#      (`--matmuls`, into gpu-matmuls.txt; cuBLAS's products too, where libcublas loads); then the mixed corpus on cuda:0 in f32 and the
#      device's own dtype, again with attention in tiles and the tuned matmul, and with tiles
#      and cuBLAS (SWITCHYARD_CUBE_ATTENTION, SWITCHYARD_CUBE_MATMUL: their cosines to f32
#      check them on a real model), beside sentence-transformers on the GPU in fp32 and fp16
#      (runs-gpu-corpus.tsv), and last, the corpus with tiles and cuBLAS handed over on the
#      device (`cublas-queued`, new: a short run of it comes first, and where that fails or
#      hangs, every step leaves it out); needs a bundle made with --cuda;
# all: both.
# A step that fails says so and the rest still run; each GPU step has a time limit of its own
# (STEP seconds, default 240), so one that hangs leaves time for the rest.
# It also writes machine.txt (CPU, memory, load, GPU, the peers' versions). Back on the
# machine with the toolchain, `cargo xtask bench --report OUT_DIR` prints the tables.
#
# Needs python3 with onnxruntime, onnx, torch, transformers and sentence-transformers (and
# `xz`, or python3's lzma). TEXTS=N embeds only each corpus' first N texts. QUICK=1 makes the
# runs fit a short lease: flex sorted by length only and without its AVX-512 kernels beside AMX,
# and `--quick` for the GPU bench (only the kernel sets with our attention, no flex beside).
set -euo pipefail

what=${1:?cpu, gpu or all}
out=${2:?a folder for the results}
threads=${3:-2,8,16}
case $what in cpu | gpu | all) ;; *) echo "device.sh: $what: expected cpu, gpu or all" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
bundle=.cache/device
work=${TMPDIR:-/tmp}/switchyard-device
for f in switchyard-bench.xz all-MiniLM-L6-v2/model.safetensors.xz corpus.jsonl corpus-128.jsonl; do
    [[ -e $bundle/$f ]] || { echo "device.sh: $bundle/$f is missing: run cargo xtask device-bundle first" >&2; exit 1; }
done
mkdir -p "$out" "$work"
say() { echo "device.sh: $*" >&2; }

unxz() { # the xz file $1 decompressed into $2
    if command -v xz >/dev/null; then
        xz -dc "$1" >"$2"
    else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
    fi
}
toxz() { # the file $1 compressed into the xz file $2
    if command -v xz >/dev/null; then
        xz -c "$1" >"$2"
    else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[2], "wb"))' "$1" "$2"
    fi
}
bin=$work/switchyard-bench
unxz "$bundle/switchyard-bench.xz" "$bin"
chmod +x "$bin"
model=$work/all-MiniLM-L6-v2
if [[ ! -e $model/model.safetensors ]]; then
    rm -rf "$work/f16" && cp -r "$bundle/all-MiniLM-L6-v2" "$work/f16"
    unxz "$work/f16/model.safetensors.xz" "$work/f16/model.safetensors" && rm "$work/f16/model.safetensors.xz"
    "$bin" weights --dtype f32 "$work/f16" "$model"
fi
corpus() { # the corpus file $1, cut to $TEXTS texts if set
    if [[ -n ${TEXTS:-} ]]; then head -n "$TEXTS" "$bundle/$1" >"$work/$1"; else cp "$bundle/$1" "$work/$1"; fi
    echo "$work/$1"
}

{
    date -u
    uname -a
    echo "cores: $(nproc)"
    lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Thread|Socket|MHz|L1d|L2|L3|Flags' || true
    free -g 2>/dev/null || true
    uptime || true
    python3 -c 'import importlib.metadata as m
for p in ("torch", "transformers", "sentence-transformers", "onnxruntime", "onnx"):
    try: print(p, m.version(p))
    except Exception as e: print(p, "missing:", e)'
    nvidia-smi 2>/dev/null || echo "(no nvidia-smi)"
} >"$out/machine.txt" 2>&1

if [[ $what != gpu ]]; then
    onnx=$work/onnx
    if [[ ! -e $onnx/model-int8.onnx ]]; then
        say "exporting the model to ONNX"
        # A failed export (another torch there) still leaves flex's runs to make.
        python3 "$here/export_onnx.py" "$model" "$onnx" >&2 || say "the ONNX export failed: no ONNX Runtime runs"
    fi
    for spec in corpus.jsonl:256 corpus-128.jsonl:128; do
        file=${spec%%:*} len=${spec##*:}
        texts=$(corpus "$file")
        runs=$out/runs-${file%.jsonl}.tsv
        : >"$runs"
        for t in ${threads//,/ }; do
            say "flex on $file, $t threads"
            "$bin" corpus --model "$model" --corpus "$texts" --threads "$t" --max-len "$len" \
                ${QUICK:+--orders sorted --no-avx512-beside-amx} | tee -a "$runs" || say "flex failed"
            [[ -e $onnx/model-int8.onnx ]] || continue
            say "ONNX Runtime on $file, $t threads"
            python3 "$here/peers.py" --model "$model" --onnx "$onnx" --corpus "$texts" --threads "$t" \
                --max-len "$len" --engines ort,ort-int8 --orders sorted | tee -a "$runs" \
                || say "ONNX Runtime failed"
        done
    done
fi

if [[ $what != cpu ]]; then
    step() { timeout "${STEP:-240}" "$@"; }
    # libcublas for the `cublas` matmul rows.
    source "$here/cuda-libs.sh" >>"$out/machine.txt"
    : >"$out/gpu-kernels.txt"
    # cuBLAS handed over on the device is new: a short run of it first (each kernel's time, a
    # product's the time its `wait` kernel waits), and where that fails or hangs, the
    # benchmarks leave it out, so that the rest still run.
    say "a first run with cuBLAS handed over on the device (cublas-queued)"
    without=()
    if ! timeout 120 "$bin" kernel-times --device cuda:0 --shape bge-base --seqs 256 --tiles \
        --matmul cublas-queued --runs 1 | tee -a "$out/gpu-kernels.txt"; then
        say "cublas-queued failed or hung: left out of what follows"
        without=(--without cublas-queued)
    fi
    # First what says most in the least time, should the lease end early. Every kernel these
    # compile (cubek's routines too, with the tuned matmul) goes with its CUDA C++ source into
    # kernel-sources.log.xz, for NVRTC's register and spill report at home (docs/benchmarks.md).
    say "each kernel's time on the device"
    sources=$work/kernel-sources.log
    : >"$sources"
    for batch in "bge-base 256" "bge-base 256 --tiles --matmul tuned" "bge-base 32" "minilm 256"; do
        set -- $batch
        step "$bin" kernel-times --device cuda:0 --shape "$1" --seqs "$2" "${@:3}" \
            --sources "$sources" | tee -a "$out/gpu-kernels.txt" || say "kernel times of $batch failed"
    done
    toxz "$sources" "$out/kernel-sources.log.xz"
    say "the GPU benchmarks"
    step "$bin" 15 --gpus-only ${QUICK:+--quick} ${without[@]+"${without[@]}"} | tee "$out/gpu-ours.txt" || say "the GPU bench failed"
    if ! grep -q '^gpu	' "$out/gpu-ours.txt"; then
        say "no GPU rows: no GPU there, or a bundle made without --cuda (the bench said why above)"
        exit 1
    fi
    # PyTorch before the matmul routines: they and the tuned matmul compile many kernels, and
    # the ratios to PyTorch matter more, should the lease end early.
    say "PyTorch on the same batches"
    step python3 "$here/gpu_peer.py" --ours "$out/gpu-ours.txt" | tee "$out/gpu-peer.txt" || say "gpu_peer.py failed"
    say "cubek's matmul routines"
    step "$bin" 15 --matmuls ${without[@]+"${without[@]}"} | tee "$out/gpu-matmuls.txt" || say "the matmul routines failed"
    texts=$(corpus corpus.jsonl)
    runs=$out/runs-gpu-corpus.tsv
    say "Switchyard on cuda:0 and sentence-transformers on the GPU, mixed corpus"
    step "$bin" corpus --model "$model" --corpus "$texts" --threads "$(nproc)" --max-len 256 \
        --device cuda:0 --dtypes f32,auto | tee "$runs" || say "Switchyard on cuda:0 failed"
    say "the same with attention in tiles and the tuned matmul"
    SWITCHYARD_CUBE_ATTENTION=tiles SWITCHYARD_CUBE_MATMUL=tuned step "$bin" corpus --model "$model" \
        --corpus "$texts" --threads "$(nproc)" --max-len 256 --device cuda:0 --dtypes f32,auto \
        --orders sorted | tee -a "$runs" || say "Switchyard on cuda:0 with tiles and tuned failed"
    say "the same with attention in tiles and cuBLAS's products (f32 first: the cosines' reference)"
    SWITCHYARD_CUBE_ATTENTION=tiles SWITCHYARD_CUBE_MATMUL=cublas step "$bin" corpus --model "$model" \
        --corpus "$texts" --threads "$(nproc)" --max-len 256 --device cuda:0 --dtypes f32,auto \
        --orders sorted | tee -a "$runs" || say "Switchyard on cuda:0 with tiles and cublas failed"
    step python3 "$here/peers.py" --model "$model" --corpus "$texts" --threads "$(nproc)" --max-len 256 \
        --engines st-cuda,st-cuda-fp16 | tee -a "$runs" || say "sentence-transformers failed"
    if [[ ${#without[@]} == 0 ]]; then
        say "the same with attention in tiles and cuBLAS handed over on the device"
        SWITCHYARD_CUBE_ATTENTION=tiles SWITCHYARD_CUBE_MATMUL=cublas-queued step "$bin" corpus \
            --model "$model" --corpus "$texts" --threads "$(nproc)" --max-len 256 \
            --device cuda:0 --dtypes f32,auto --orders sorted | tee -a "$runs" \
            || say "Switchyard on cuda:0 with tiles and cublas-queued failed"
    fi
fi
say "done: $out"
