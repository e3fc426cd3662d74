#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for a bounded time each, on the seed corpus.
#
#   crates/mur-core/fuzz/run.sh [-t SECONDS] [TARGET…]      SECONDS defaults to $FUZZ_SECONDS or 60
#
# New inputs the fuzzer finds go to a scratch corpus under target/ here (not the repo's seeds),
# so a run never changes tracked files; crashes land in artifacts/<target>/ here and make the
# script exit non-zero. Needs a nightly toolchain and cargo-fuzz.
set -euo pipefail

cd "$(dirname "$0")"
secs="${FUZZ_SECONDS:-60}"
if [[ "${1:-}" == "-t" ]]; then
    secs="$2"
    shift 2
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

cargo +nightly fuzz build

failed=()
for t in "${targets[@]}"; do
    scratch="target/corpus-run/$t"
    log="target/corpus-run/$t.log"
    mkdir -p "$scratch"
    dict=()
    if [[ "$t" == roster_parse ]]; then
        dict=("-dict=roster.dict")
    fi
    echo "== $t: ${secs}s"
    # -rss_limit_mb makes "memory stays bounded" a checked property; -timeout flags hangs.
    status=0
    cargo +nightly fuzz run "$t" "$scratch" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=512 -timeout=10 -print_final_stats=1 \
        "${dict[@]}" >"$log" 2>&1 || status=$?
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY)|panicked at|Test unit written' "$log" || true
    if [[ $status -ne 0 ]]; then
        failed+=("$t")
        tail -n 30 "$log"
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "findings in: ${failed[*]} (see crates/mur-core/fuzz/artifacts/)" >&2
    exit 1
fi
echo "no findings"
