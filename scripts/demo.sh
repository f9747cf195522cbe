#!/usr/bin/env bash
# The README's demo: build the example agents for WebAssembly, then run one
# turn of the `tools` agent in-process with the built-in offline model —
# no server, no key, no network. The model calls the agent's `add` tool,
# the agent runs it, and the model reports the result, streamed.
#
# `cargo run` uses the dev profile on purpose: it shares the build of
# `cargo test --workspace`, so after the tests the demo compiles little.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2 -p passthrough -p tools
target="${CARGO_TARGET_DIR:-target}"
cargo run -p subs-cli -- run "$target/wasm32-wasip2/release/tools.wasm" 'use tool add with {"a": 1, "b": 2}'
