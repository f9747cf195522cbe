#!/usr/bin/env bash
# The README's demo: build the example agents for WebAssembly, then run one
# turn of the `tools` agent in-process with the built-in offline model —
# no server, no key, no network. The model calls the agent's `add` tool,
# the agent runs it, and the model reports the result, streamed.
#
# The engine is built in the dev profile and with the whole workspace's
# features (`--workspace --bins`, not `cargo run -p subs-cli`), so that it
# is the very binary `cargo test --workspace` builds: after the tests the
# demo compiles nothing, where `-p subs-cli` alone resolves other features
# for tokio, indexmap and anyhow and rebuilds wasmtime and the HTTP stack.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2 -p passthrough -p tools
target="${CARGO_TARGET_DIR:-target}"
cargo build --workspace --bins
"$target/debug/subs" run "$target/wasm32-wasip2/release/tools.wasm" 'use tool add with {"a": 1, "b": 2}'
