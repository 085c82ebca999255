#!/usr/bin/env bash
# Every CUDA test and benchmark of kt, for a lent GPU machine, in well under 5 minutes.
#
# The GPU machine's image has nvcc, CMake and the CUDA libraries but not kt's Debian dependencies (hwloc, Catch2,
# xbyak, ...), so the binaries are built on a development machine and carried:
#
#   here:   bash bench/gpu/run_cuda_checks.sh --prepare [BUILD_DIR]
#             builds the CUDA targets in BUILD_DIR (default build-rel, configured with CUDA on; KT_WITH_CUDA=AUTO
#             turns it on where nvcc is found) and copies them, with the shared libraries they need that the GPU
#             image lacks, into build-gpu-checks/ (about 30 MB)
#   there:  bash bench/gpu/run_cuda_checks.sh --run [build-gpu-checks]
#             (device tool: carry ["build-gpu-checks"], timeout_s 400)
#
# --run without a prepared folder, or with binaries that cannot start there, configures and builds the same targets
# on the GPU machine itself (this needs kt's dependencies there; it says what is missing if they are not).
#
# What to quote in a note: the lines starting with "==" (each step's verdict and time), the test cases' WARN lines
# (GPU name, skipped or not, the hybrid's device / CPU / overlap times, the streamed layer's upload) and
# kt-hybrid-bench's tables (stream_x: where a call above the prefill threshold beats the CPU; the streamed pass:
# what the stream buffer's second slot saves a long prompt when the next layer's experts go up beside attention).
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TESTS=(kt_unit_cuda_experts kt_unit_core kt_moe_hybrid kt_api_device)
BENCHES=(kt-hybrid-bench)

prepare() {
    local build=${1:-build-rel}
    [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKT_WITH_CUDA=ON || exit 1
    grep -q '^KT_WITH_CUDA:STRING=OFF' "$build/CMakeCache.txt" && { echo "$build has KT_WITH_CUDA=OFF"; exit 1; }
    cmake --build "$build" -j2 --target "${TESTS[@]}" "${BENCHES[@]}" || exit 1
    rm -rf build-gpu-checks && mkdir -p build-gpu-checks/bin build-gpu-checks/lib
    for t in "${TESTS[@]}" "${BENCHES[@]}"; do
        local bin
        bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
        [ -n "$bin" ] || { echo "no binary for $t in $build"; exit 1; }
        cp "$bin" build-gpu-checks/bin/ && strip build-gpu-checks/bin/"$t"
        # Shared libraries outside glibc, the compiler's runtime and CUDA: the GPU image does not have them.
        ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
            case "$(basename "$lib")" in
                libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
                libcu*|libnv*) ;;
                *) cp -L "$lib" build-gpu-checks/lib/ ;;
            esac
        done
    done
    # The tests read shared/testdata for nothing here, but the tiny-model and test-input helpers need no files.
    du -sh build-gpu-checks
    echo "prepared: carry build-gpu-checks and run: bash bench/gpu/run_cuda_checks.sh --run build-gpu-checks"
}

build_there() {
    echo "== building on this machine"
    local build=/tmp/kt-cuda-build
    timeout 60 cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        >/tmp/kt-cuda-configure.log 2>&1 || { echo "== configure FAILED (kt's dependencies are not here):"; tail -20 /tmp/kt-cuda-configure.log; exit 1; }
    timeout 200 cmake --build $build -j16 --target "${TESTS[@]}" "${BENCHES[@]}" >/tmp/kt-cuda-build.log 2>&1 ||
        { echo "== build FAILED"; tail -40 /tmp/kt-cuda-build.log; exit 1; }
    DIR=$build/bin
}

step() {  # step NAME TIMEOUT COMMAND...: runs, times and reports
    local name=$1 limit=$2
    shift 2
    local t0 rc
    t0=$(date +%s%N)
    timeout "$limit" "$@"
    rc=$?
    printf '== %-48s rc=%d  %d ms\n' "$name" "$rc" $((($(date +%s%N) - t0) / 1000000))
    [ $rc -eq 0 ] || FAILED="$FAILED $name"
}

run() {
    local dir=${1:-build-gpu-checks}
    export LD_LIBRARY_PATH="$ROOT/$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    # The image's pip-installed cuBLAS, when the toolkit's lib64 has none.
    for d in /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu*/lib; do
        [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
    done
    echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
    nproc; date -u
    DIR=$ROOT/$dir/bin
    # (Catch2 2's --list-tests exits with the number of tests; --help exits 0 once the binary has started.)
    if [ ! -x "$DIR/kt_unit_cuda_experts" ] || ! "$DIR/kt_unit_cuda_experts" --help >/dev/null 2>&1; then
        [ -x "$DIR/kt_unit_cuda_experts" ] && { echo "== the carried binaries do not start here:"; "$DIR/kt_unit_cuda_experts" --help 2>&1 | head -5; }
        build_there
    fi
    FAILED=""
    # -s prints every assertion and WARN (the device's name, timings); --durations yes each case's time.
    step "kt_unit_cuda_experts (CUDA experts vs stand-in)" 120 "$DIR/kt_unit_cuda_experts" --durations yes -s -r compact
    step "kt_unit_core (discovery, dequantization)" 60 "$DIR/kt_unit_core" "cuda*" --durations yes
    step "kt_moe_hybrid (stand-in, for reference)" 60 "$DIR/kt_moe_hybrid" --durations yes
    step "kt_api_device (kt.h; KT_DEVICE_CUDA load path)" 60 "$DIR/kt_api_device" --durations yes -s -r compact
    echo "== kt-hybrid-bench: Qwen3-30B-A3B-shaped layer (128 experts, 2048 x 768, top-8), Q8_0 on the CPU"
    step "kt-hybrid-bench uniform, 32 of 128 on the GPU" 90 "$DIR/kt-hybrid-bench" --device cuda --experts 128 \
        --hidden 2048 --inter 768 --top-k 8 --resident 32 --tokens 1,8,64,256,1024 --iters 5 --warmup 2
    step "kt-hybrid-bench skewed (s=1.2), 32 hottest on the GPU" 90 "$DIR/kt-hybrid-bench" --device cuda --experts 128 \
        --hidden 2048 --inter 768 --top-k 8 --resident 32 --tokens 1,8,64,256 --iters 5 --warmup 2 --skew 1.2 \
        --stream-layers 0
    if [ -n "$FAILED" ]; then echo "== FAILED:$FAILED"; exit 1; fi
    echo "== all CUDA checks passed"
}

case "${1:-}" in
    --prepare) prepare "${2:-}" ;;
    --run) run "${2:-}" ;;
    *) echo "usage: $0 --prepare [BUILD_DIR] | --run [DIR]"; exit 2 ;;
esac
