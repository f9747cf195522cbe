#!/usr/bin/env bash
# Runs the benches of an earlier revision and of this checkout side by
# side, interleaved, and prints how this checkout's figures compare.
#
#   ./scripts/bench-compare.sh BASE [BENCH...]
#   BENCH_ROUNDS_COMPARE=3 ./scripts/bench-compare.sh be5dd2e component replay
#
# BASE is checked out as a detached worktree under
# target/bench-compare/base, or BENCH_COMPARE_BASE_DIR (its own target
# directory: a second release build, about 8 GB). BENCH names a bench of subs-tests (component,
# workers, turns, ...) or `api` (subs-cli's, subs alone); by default every
# bench both revisions have. Each round runs every bench once on each
# side, the side going first alternating from round to round, so a slow
# stretch of a shared machine falls on both. Every other BENCH_* variable
# reaches both sides unchanged (several benches read the same names, such
# as BENCH_LEVELS: run those apart to give each its own). The JSON of each run is kept under
# target/bench-compare/runs/, and scripts/lib/bench_compare.py reads them:
# per figure, each side's best run and head over base, and which figures
# are more than 5% worse.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
    echo "usage: $0 BASE [BENCH...]" >&2
    exit 2
fi
base_rev=$1
shift
rounds=${BENCH_ROUNDS_COMPARE:-2}
head=$PWD
out="$head/target/bench-compare"
base="${BENCH_COMPARE_BASE_DIR:-$out/base}"
runs="$out/runs"
mkdir -p "$runs"
export RUST_LIB_BACKTRACE=0

wanted_rev=$(git rev-parse --verify "$base_rev^{commit}")
if [ -d "$base" ] && [ "$(git -C "$base" rev-parse HEAD)" != "$wanted_rev" ]; then
    git -C "$base" checkout -q --detach "$wanted_rev"
elif [ ! -d "$base" ]; then
    git worktree add -q --detach "$base" "$wanted_rev"
fi

# The benches a tree has: subs-tests' [[bench]] names, and `api`.
benches_of() {
    sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"/\1/p}' "$1/tests/Cargo.toml"
    [ -f "$1/engine/cli/benches/api.rs" ] && echo api
}
if [ $# -gt 0 ]; then
    benches=("$@")
else
    mapfile -t benches < <(comm -12 <(benches_of "$base" | sort) <(benches_of "$head" | sort))
fi

for tree in "$base" "$head"; do
    echo "== building the benches of $tree" >&2
    (cd "$tree" && cargo bench -q -p subs-tests --no-run && cargo bench -q -p subs-cli --bench api --no-run)
done

run_one() { # tree side bench round
    local package=subs-tests
    [ "$3" = api ] && package=subs-cli
    echo "== round $4: $3 on $2" >&2
    (cd "$1" && cargo bench -q -p "$package" --bench "$3") > "$runs/$3-$2-$4.log" 2>&1 || {
        echo "$3 on $2 failed; see $runs/$3-$2-$4.log" >&2
        return 1
    }
    cp "$1/target/bench-$3.json" "$runs/$3-$2-$4.json"
}

for bench in "${benches[@]}"; do
    rm -f "$runs/$bench"-*.json "$runs/$bench"-*.log
done
for round in $(seq 1 "$rounds"); do
    for bench in "${benches[@]}"; do
        if [ $((round % 2)) -eq 1 ]; then
            run_one "$base" base "$bench" "$round"
            run_one "$head" head "$bench" "$round"
        else
            run_one "$head" head "$bench" "$round"
            run_one "$base" base "$bench" "$round"
        fi
    done
done

python3 scripts/lib/bench_compare.py "$runs" "${benches[@]}"
