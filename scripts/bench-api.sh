#!/usr/bin/env bash
# The API benchmark with LangGraph beside it: makes (or reuses) the pinned
# Python environment of scripts/langgraph/, then runs `--bench api`, which
# starts `subs serve` and LangGraph's server and drives both with the same
# keep-alive client, case by case, one right after the other. Results:
# the table on stdout and target/bench-api.json.
#
#   ./scripts/bench-api.sh
#   BENCH_LEVELS=1,16,64 BENCH_SECONDS=10 ./scripts/bench-api.sh
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
python=$(./scripts/langgraph/setup.sh "$target/langgraph-venv" | tail -n 1)
BENCH_LANGGRAPH_PYTHON="$python" cargo bench -p subs-cli --bench api
