#!/usr/bin/env bash
# Coverage-guided fuzzing of the targets in fuzz/ for a few seconds each,
# on the stable toolchain: the targets are built with the same coverage
# instrumentation cargo-fuzz uses (all stable `-C` options) and run by the
# libFuzzer that libfuzzer-sys links in. What cargo-fuzz adds on nightly is
# AddressSanitizer, which these safe-Rust targets do not need to find
# panics and broken properties. CI runs it with 15 seconds per target;
# give more for a longer run:
#
#   ./scripts/fuzz.sh 600
#
# New inputs the fuzzer finds go to a scratch directory, not into the
# committed seeds (fuzz/corpus/); a failing input is kept and its path
# printed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-15}"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
host=$(rustc -vV | sed -n 's/^host: //p')
# `--target` keeps the instrumentation off build scripts and proc macros.
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks" \
  CARGO_TARGET_DIR="$target_dir" cargo build --manifest-path fuzz/Cargo.toml --release --locked --target "$host"

scratch=$(mktemp -d)
for target in client_input decision_response decision_request_wit sse; do
  mkdir -p "$scratch/$target"
  dict=()
  [ "$target" = sse ] || dict=(-dict=fuzz/json.dict)
  if ! "$target_dir/$host/release/$target" "$scratch/$target" "fuzz/corpus/$target" "${dict[@]}" \
    -max_total_time="$seconds" -artifact_prefix="$scratch/" >"$scratch/$target.log" 2>&1; then
    cat "$scratch/$target.log"
    echo "fuzz target $target failed; the input is in $scratch" >&2
    exit 1
  fi
  echo "$target: $(grep -E '^Done [0-9]+ runs' "$scratch/$target.log")"
done
rm -rf "$scratch"
