#!/usr/bin/env bash
# Records the AMX figures of issue 15 (points 1 and 2) on an AMX host: the kernels one core at a time
# (bench_gemm: the fastest call, weights in L2, next to the TMUL probes), the expert pool on the Qwen3-30B-A3B and
# DeepSeek-V3 shapes for every format at 1, 4, 512 and 2048 tokens (kt-expert-bench: the roofline measured with the
# same threads before every case), and kt-bench on an 8-layer Qwen3-30B-A3B-shaped Q4_K_M file, on AMX and with
# AVX-512 only (KT_MAX_ISA=avx512) for comparison.
# Usage: bench/results/run_amx_gguf.sh [build dir] [output prefix]
# Take final numbers on a quiet machine: the load average goes into the log, before and after each run.
set -euo pipefail
build=${1:-build}
out=${2:-bench/results/amx_gguf_$(date +%Y%m%d_%H%M)}
formats=int8,int4,bf16,q4_k,q5_k,q6_k,q8_0,q4_0,iq4_xs
{
  echo "# $(date -u +%FT%TZ) $(uname -srm)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3 cache)' | sed 's/^/# /' | cut -c1-200
  echo "# memory: $(free -g | awk '/Mem:/ {print $2}') GiB; THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
  echo "# load average: $(cat /proc/loadavg)"
} > "$out.log"
"$build/bin/bench_gemm" --benchmark_filter='BM_peak|BM_gemm_cached/.*/(amx|avx512-vnni-bf16(-gfni-vbmi)?)/' \
  --benchmark_min_time=0.1 --benchmark_format=json > "$out.kernels.json" 2>>"$out.log"
echo "# load average after bench_gemm: $(cat /proc/loadavg)" >> "$out.log"
"$build/bin/kt-expert-bench" --preset qwen3 --format "$formats" --tokens 1,4 --reps 20 --warmup 3 --csv 2>>"$out.log" \
  | tee -a "$out.log" | grep -v '^#' > "$out.qwen3.csv"
"$build/bin/kt-expert-bench" --preset qwen3 --format "$formats" --tokens 512,2048 --reps 5 --csv 2>>"$out.log" \
  | tee -a "$out.log" | grep -v '^#' | tail -n +2 >> "$out.qwen3.csv"
# DeepSeek-V3: one layer; BF16 (22.5 GiB for 256 experts) does not fit 16 GiB and is skipped with a message.
"$build/bin/kt-expert-bench" --preset deepseek --format "$formats" --tokens 1,4,512,2048 --reps 3 --warmup 1 --csv \
  --layers 1 2>>"$out.log" | tee -a "$out.log" | grep -v '^#' > "$out.deepseek.csv"
model=${KT_BENCH_MODEL:-/tmp/kt_qwen3_30b_a3b_8l_q4_k_m.gguf}
[ -f "$model" ] || "$build/bin/kt-synth" -o "$model" --preset qwen3-30b-a3b --layers 8 --type q4_k_m >> "$out.log"
for isa in amx avx512; do
  echo "# kt-bench, KT_MAX_ISA=$isa, load average $(cat /proc/loadavg)" >> "$out.log"
  KT_MAX_ISA=$isa "$build/bin/kt-bench" -m "$model" -p 512 -n 128 -r 3 -o md 2>>"$out.log" | tee -a "$out.log" \
    > "$out.kt_bench_$isa.md"
done
echo "# load average at the end: $(cat /proc/loadavg)" >> "$out.log"
echo "written: $out.log $out.kernels.json $out.qwen3.csv $out.deepseek.csv $out.kt_bench_{amx,avx512}.md"
