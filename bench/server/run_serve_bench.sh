#!/usr/bin/env bash
# Runs kt-server's serving benchmark (serve_bench.mjs) on a Qwen3-30B-A3B-shaped model: 8 layers, Q4_K_M, with
# Qwen3's real vocabulary and chat template. Builds what it needs, makes the model with kt-synth if it is missing,
# installs the openai package into the build tree, and writes PREFIX.md and PREFIX.csv.
# Usage: bench/server/run_serve_bench.sh [build dir] [model file] [output prefix] [more serve_bench.mjs flags]
set -euo pipefail
build=${1:-build}
model=${2:-$build/qwen3-30b-a3b-8l-q4km-vocab.gguf}
out=${3:-bench/results/server_$(date +%Y%m%d_%H%M)}
shift $(( $# < 3 ? $# : 3 ))
cmake --build "$build" --target kt-server kt-run kt-bench kt-synth -j2
if [ ! -f "$model" ]; then
  "$build/bin/kt-synth" -o "$model" --preset qwen3-30b-a3b --layers 8 --type q4_k_m \
    --vocab-from "$(dirname "$0")/../../../shared/testdata/tokenizer/qwen3.gguf"
fi
dir="$build/bench-server"
mkdir -p "$dir"
cp "$(dirname "$0")"/package.json "$(dirname "$0")"/package-lock.json "$(dirname "$0")"/serve_bench.mjs "$dir/"
(cd "$dir" && npm ci --no-audit --no-fund --prefer-offline)
node "$dir/serve_bench.mjs" --bin "$build/bin" -m "$model" --out "$out" "$@"
