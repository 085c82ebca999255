#!/usr/bin/env bash
# How kt copes with a busy host: runs a command alone and beside 1..N busy loops (plain shell loops at the same
# priority, one per core they take), and prints its wall and CPU seconds each time. kt's threads are pinned one per
# core, so a busy loop on a core makes kt's thread there wait for turns; a job that waits for every thread pays
# that at each job (bench/results/fuzz-log.md, 2026-12-04).
#
#   bench/fuzz/busy_host.sh MAX_LOOPS COMMAND [ARGS...]
#   e.g. bench/fuzz/busy_host.sh 2 build/bin/kt_fuzz_model_replay tests/fuzz/corpus/model
set -euo pipefail
max_loops=$1
shift
loops=()
times=$(mktemp)
stop_loops() { [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true; loops=(); }
trap 'stop_loops; rm -f "$times"' EXIT
for n in $(seq 0 "$max_loops"); do
    for _ in $(seq 1 "$n"); do
        sh -c 'while :; do :; done' &
        loops+=($!)
    done
    sleep 0.5
    /usr/bin/time -o "$times" -f "busy loops: $n  wall %e s  user %U s  sys %S s  exit %x" "$@" > /dev/null 2>&1 || true
    cat "$times"
    stop_loops
    sleep 1
done
