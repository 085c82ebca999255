#!/usr/bin/env bash
# Records kt-expert-bench for the shapes and formats: Qwen3-30B-A3B and DeepSeek-V3 experts, INT8, INT4
# (group 128), BF16, Q4_K, Q8_0, decode (1 and 4 tokens) and prefill (512 and 2048 tokens), all cores.
# Usage: bench/results/run_expert_bench.sh [build dir] [output prefix]
# Take final numbers on a quiet machine: the load average goes into the log, before and after each run.
set -euo pipefail
build=${1:-build}
out=${2:-bench/results/expert_$(date +%Y%m%d_%H%M)}
bin="$build/bin/kt-expert-bench"
{
  echo "# $(date -u +%FT%TZ) $(uname -srm)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3 cache|Flags)' | sed 's/^/# /' | cut -c1-200
  echo "# memory: $(free -g | awk '/Mem:/ {print $2}') GiB; THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
} > "$out.log"
# Qwen3: enough layers to rotate over (>= 1 GiB of weights); many repetitions for decode.
"$bin" --preset qwen3 --format int8,int4,bf16,q4_k,q8_0 --tokens 1,4 --reps 50 --warmup 5 --csv 2>>"$out.log" \
  | tee -a "$out.log" | grep -v '^#' > "$out.qwen3.csv"
"$bin" --preset qwen3 --format int8,int4,bf16,q4_k,q8_0 --tokens 512,2048 --reps 5 --csv 2>>"$out.log" \
  | tee -a "$out.log" | grep -v '^#' | tail -n +2 >> "$out.qwen3.csv"
# DeepSeek-V3: one layer (11 GiB as INT8); BF16 (22.5 GiB for 256 experts) does not fit this machine's memory,
# so BF16 runs with 96 experts: decode reads the same bytes per token; prefill has 2.7x more tokens per expert.
"$bin" --preset deepseek --format int8,int4,q4_k,q8_0 --tokens 1,4,512,2048 --reps 5 --warmup 2 --csv --max-gib 14 \
  2>>"$out.log" | tee -a "$out.log" | grep -v '^#' > "$out.deepseek.csv"
"$bin" --preset deepseek --experts 96 --format bf16 --tokens 1,4,512,2048 --reps 5 --warmup 2 --csv --max-gib 14 \
  2>>"$out.log" | tee -a "$out.log" | grep -v '^#' | tail -n +2 >> "$out.deepseek.csv"
echo "written: $out.log $out.qwen3.csv $out.deepseek.csv"
