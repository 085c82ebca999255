#!/usr/bin/env bash
# A long libFuzzer campaign on one of kt's fuzz targets (tests/fuzz), recorded for bench/results/fuzz-log.md.
#
#   bench/fuzz/run_campaign.sh configure DIR         a campaign build: clang -O2, libFuzzer + UBSan, no ASan
#   bench/fuzz/run_campaign.sh run DIR TARGET RUNS [MAX_LEN] [OUT]     RUNS: executions, or seconds as "5400s"
#   bench/fuzz/run_campaign.sh replay ASAN_DIR TARGET OUT      ASAN_DIR: the asan preset's build (build-asan)
#   bench/fuzz/run_campaign.sh minimize DIR TARGET    tests/fuzz/corpus/TARGET down to the files with its features
#
# KT_FUZZ_TIMEOUT (seconds, default 60): libFuzzer's -timeout, which counts wall time. Raise it for a campaign that
# runs at a low priority beside builds, where a starved input can take minutes without hanging.
#
# Why two builds: ASan costs the targets 2-10x, and a campaign is about executions. The campaign build keeps UBSan
# (cheap; integer overflow and bad casts are what the template interpreter and the hyperparameter checks are about)
# and libFuzzer's own checks (crashes, hangs over -timeout, RSS over -rss_limit_mb). Afterwards `replay` runs every
# input the campaign kept through the asan preset's ASan + UBSan replay binary, so each input that reached new
# coverage is also checked for memory errors.
#
# `run` starts from the committed corpus (tests/fuzz/corpus/TARGET, only read) plus OUT/corpus when it exists (so a
# campaign can go on where an earlier one stopped), writes new inputs to OUT/corpus, crashes to OUT/, and prints
# one summary line: target, executions, seconds, exec/s, corpus files before and after, new units, peak RSS.
#
# `minimize` keeps every file with a name of its own (hand-made seeds, a finding's reproducer: rename a file to keep
# it) and, of the files libFuzzer named by their SHA-1, those that `-merge=1` finds carrying features the kept ones
# lack; then it merges the whole old corpus in once more, because some features depend on thread timing and a
# file whose feature did not show the first time may show the second. Every replay of a corpus costs the README's
# test command its time, and each campaign part adds files whose features later files also carry.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)

case "${1:-}" in
configure)
    dir=$2
    cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DKT_BUILD_FUZZ=ON \
        -DKT_BUILD_SERVER=ON -DKT_SANITIZE=undefined -DKT_WITH_CUDA=OFF -DKT_BUILD_BENCH=OFF -DKT_BUILD_EXAMPLES=OFF
    cmake --build "$dir" -j"$(nproc)" --target kt_fuzz_gguf kt_fuzz_chat_template kt_fuzz_tokenizer kt_fuzz_model \
        kt_fuzz_server_request
    ;;
run)
    dir=$2 target=$3 runs=$4 max_len=${5:-0} out=${6:-$PWD/campaign-$3}
    mkdir -p "$out/corpus"
    seed="$here/tests/fuzz/corpus/$target"
    before=$(( $(ls "$seed" | wc -l) + $(ls "$out/corpus" | wc -l) ))
    len_flag=()
    [ "$max_len" != 0 ] && len_flag=(-max_len="$max_len")
    # A part of a campaign that will take several (a target too slow for 10 M executions in one sitting) runs for a
    # time; the next part goes on from OUT/corpus, or from the committed corpus once OUT's inputs are merged into it.
    limit_flag=(-runs="$runs")
    [[ "$runs" == *s ]] && limit_flag=(-max_total_time="${runs%s}")
    start=$(date +%s)
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$dir/bin/kt_fuzz_$target" "${limit_flag[@]}" "${len_flag[@]}" \
        -timeout="${KT_FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus" "$seed" \
        > "$out/fuzz.log" 2>&1 || { echo "$target: the fuzzer stopped with a finding, see $out/fuzz.log"; exit 1; }
    seconds=$(( $(date +%s) - start ))
    stat() { awk -v k="stat::$1:" '$1 == k {print $2}' "$out/fuzz.log"; }
    after=$(( $(ls "$seed" | wc -l) + $(ls "$out/corpus" | wc -l) ))
    echo "$target executions=$(stat number_of_executed_units) seconds=$seconds exec_per_s=$(stat average_exec_per_sec)" \
         "corpus_before=$before corpus_after=$after new_units=$(stat new_units_added) peak_rss_mb=$(stat peak_rss_mb)" \
         "max_len=${max_len}" | tee -a "$out/summary.txt"
    ;;
replay)
    asan=$2 target=$3 out=$4
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$asan/bin/kt_fuzz_${target}_replay" "$out/corpus" | tee -a "$out/summary.txt"
    ;;
minimize)
    dir=$2 target=$3
    corpus="$here/tests/fuzz/corpus/$target"
    work=$(mktemp -d)
    mkdir "$work/kept" "$work/rest"
    for f in "$corpus"/*; do
        if [[ "$(basename "$f")" =~ ^[0-9a-f]{40}$ ]]; then cp "$f" "$work/rest/"; else cp "$f" "$work/kept/"; fi
    done
    merge() {
        "$dir/bin/kt_fuzz_$target" -merge=1 -timeout="${KT_FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 "$work/kept" "$1" \
            > "$work/merge.log" 2>&1 || { cat "$work/merge.log"; exit 1; }
        tail -n 1 "$work/merge.log"
    }
    merge "$work/rest"
    merge "$corpus"
    before=$(ls "$corpus" | wc -l)
    comm -23 <(ls "$corpus" | sort) <(ls "$work/kept" | sort) | while read -r name; do rm "$corpus/$name"; done
    echo "$target: $before -> $(ls "$corpus" | wc -l) files in $corpus"
    rm -rf "$work"
    ;;
*)
    sed -n '2,17p' "$0"
    exit 2
    ;;
esac
