#!/bin/sh
# Load time and peak resident memory of kt-run on one model, with the machine's roofline measured in the same run.
#
#   bench/load/run_load_bench.sh BUILD_DIR MODEL.gguf [RUNS]
#
# Warm page cache: the file is read once before the runs (cat > /dev/null), so the times are packing, not disk.
# Each run is `kt-run -v -m MODEL --tokens 1,2,3 -n 1` under /usr/bin/time: its "load:" line (kt_model_load with
# prepare, i.e. reading and packing), kt's "prepared ... GB/s" log line, the wall time and the peak RSS (VmHWM, as
# time's %M). Prints the load average before each run; quote medians.
set -eu
build=$1 model=$2 runs=${3:-3}
bin=$build/bin
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r)"
echo "# file: $model, $(stat -c %s "$model") bytes"
grep -m1 'model name' /proc/cpuinfo
"$bin/kt-bench" -m "$(dirname "$0")/../../examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf" -p 0 -n 1 -r 1 2>&1 |
    grep -m1 'roofline with'
cat "$model" > /dev/null
i=1
while [ "$i" -le "$runs" ]; do
    echo "## run $i, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "wall %e s, peak RSS %M KiB" "$bin/kt-run" -v -m "$model" --tokens 1,2,3 -n 1 2>&1 |
        grep -E 'prepared|^load:|^wall' | sed 's/^kt: .*kernels:/kt: kernels:/'
    i=$((i + 1))
done
