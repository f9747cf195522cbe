#!/usr/bin/env bash
# Builds the test agent MODULE.js of this directory as a component of the
# agent-json world of subs:agent@0.2.0 (or of the world and version named),
# with the esbuild and componentize-js that examples/tools-js/build.sh
# installs: run that first (tests/build.rs does).
#
#   tests/js/build.sh [--world agent-json|agent] [--wit-version 0.2.0|0.1.0] MODULE OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
world=agent-json
version=0.2.0
while [ $# -gt 0 ]; do
    case $1 in
        --world) world=${2:?--world takes agent-json or agent}; shift 2 ;;
        --wit-version) version=${2:?--wit-version takes 0.2.0 or 0.1.0}; shift 2 ;;
        *) break ;;
    esac
done
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
    --wit "$root/wit" --world-name "subs:agent/$world@$version" --out "$out"
