#!/usr/bin/env bash
# Builds the test agent MODULE.js of this directory as a component of the
# agent-json world, with the esbuild and componentize-js that
# examples/tools-js/build.sh installs: run that first (tests/build.rs does).
#
#   tests/js/build.sh MODULE OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
module=$1
out=$2
case $out in /*) ;; *) out=$PWD/$out ;; esac
bin=$root/examples/tools-js/node_modules/.bin
if [ ! -x "$bin/componentize-js" ]; then
    echo "no componentize-js in $bin: run examples/tools-js/build.sh first" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
# As examples/tools-js/build.sh bundles: `subs-component` makes the SDK
# reach the engine's imports, which componentize-js binds.
"$bin/esbuild" "$here/$module.js" --bundle --format=esm --platform=neutral \
    --conditions=subs-component --external:'subs:*' --external:'wasi:*' \
    --log-level=warning --outfile="$bundle/agent.bundle.js"
"$bin/componentize-js" "$bundle/agent.bundle.js" \
    --wit "$root/wit" --world-name subs:agent/agent-json@0.1.0 --out "$out"
