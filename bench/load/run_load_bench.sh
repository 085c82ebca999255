#!/bin/sh
# Load time and peak resident memory of kt-run on one model, with the machine's roofline measured in the same run.
#
#   bench/load/run_load_bench.sh BUILD_DIR MODEL.gguf [RUNS]
#
# Warm page cache: the file is read once before the runs (cat > /dev/null), so the times are packing, not disk.
# Each run is `kt-run -v -m MODEL --tokens 1,2,3 -n 1` under /usr/bin/time: its "load:" line (kt_model_load with
# prepare, i.e. reading and packing), kt's "prepared ... GB/s" log line, the wall time and the peak RSS (VmHWM, as
# time's %M). Prints the load average before each run; quote medians.
#
#   bench/load/run_load_bench.sh BUILD_DIR MODEL.gguf RUNS cache
#
# The pack cache (kt-run --pack-cache, issue 15 point 5), all on the same file in one run, per run:
#   read once    `cat MODEL > /dev/null`, warm (page cache) and cold (after drop_caches, when we may write it);
#   first load   no cache file: pack, write MODEL.ktpack; kt's packing rate (GB/s) and the cache line;
#   restart      with the cache, warm and cold: its "load:" time and peak RSS, and the ratio to reading once.
set -eu
build=$1 model=$2 runs=${3:-3} mode=${4:-}
bin=$build/bin
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(uname -r)"
echo "# file: $model, $(stat -c %s "$model") bytes"
grep -m1 'model name' /proc/cpuinfo
if [ -x "$bin/kt-bench" ]; then
    "$bin/kt-bench" -m "$(dirname "$0")/../../examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf" -p 0 -n 1 -r 1 2>&1 |
        grep -m1 'roofline with' || true
fi
cat "$model" > /dev/null
if [ "$mode" = cache ]; then
    cache=$model.ktpack
    ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
    drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null; }
    can_drop=no
    if [ -w /proc/sys/vm/drop_caches ]; then can_drop=yes; fi
    kt_run() {
        /usr/bin/time -f "wall %e s, peak RSS %M KiB" "$bin/kt-run" -v -m "$model" --pack-cache "$cache" \
            --tokens 1,2,3 -n 1 2>&1 | grep -E 'prepared|pack cache|^load:|^wall' |
            sed 's/^kt: .*kernels:/kt: kernels:/'
    }
    i=1
    while [ "$i" -le "$runs" ]; do
        echo "## run $i, load average $(cut -d' ' -f1-3 /proc/loadavg)"
        cat "$model" > /dev/null
        t=$(date +%s%N); cat "$model" > /dev/null; echo "read once, warm: $(ms "$t") ms"
        rm -f "$cache"
        echo "# first load (writes the cache)"
        kt_run
        echo "# cache: $(stat -c %s "$cache") bytes"
        cat "$model" > /dev/null
        echo "# restart with the cache, warm"
        kt_run
        if [ "$can_drop" = yes ]; then
            drop
            t=$(date +%s%N); cat "$model" > /dev/null; echo "read once, cold: $(ms "$t") ms"
            drop
            echo "# restart with the cache, cold"
            kt_run
        fi
        i=$((i + 1))
    done
    exit 0
fi
i=1
while [ "$i" -le "$runs" ]; do
    echo "## run $i, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "wall %e s, peak RSS %M KiB" "$bin/kt-run" -v -m "$model" --tokens 1,2,3 -n 1 2>&1 |
        grep -E 'prepared|^load:|^wall' | sed 's/^kt: .*kernels:/kt: kernels:/'
    i=$((i + 1))
done
