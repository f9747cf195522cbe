#!/usr/bin/env bash
# Builds the agent as a component with the pinned toolchain (package-lock.json):
# esbuild bundles agent.js with the SDK, componentize-js (default settings)
# makes the component of the subs:agent/agent-json world, whose `decide`
# takes and gives JSON text (the SDK's `exportAgent` serves either world;
# `--world agent` builds the typed one, which decides several times slower).
# The world is subs:agent@0.2.0's, whose branch the SDK reads on demand;
# `--wit-version 0.1.0` builds against that version's, which receives the
# whole branch with each request.
#
#   ./build.sh [--world agent-json|agent] [--wit-version 0.2.0|0.1.0] [OUT]
#   # default OUT: <repo>/target/guests/js/tools_js.wasm
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
out=${1:-$root/target/guests/js/tools_js.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac

cd "$here"
# A copy of the lockfile it was installed from marks node_modules as
# current: a changed pin reinstalls.
if ! cmp -s package-lock.json node_modules/.subs-package-lock.json; then
    npm ci --no-audit --no-fund
    cp package-lock.json node_modules/.subs-package-lock.json
fi
mkdir -p build "$(dirname "$out")"
# `subs-component` makes the SDK reach the engine's imports (`#host`); the
# `subs:` and `wasi:` imports are left for componentize-js to bind.
node_modules/.bin/esbuild agent.js --bundle --format=esm --platform=neutral \
    --conditions=subs-component --external:'subs:*' --external:'wasi:*' \
    --log-level=warning --outfile=build/agent.bundle.js
node_modules/.bin/componentize-js build/agent.bundle.js \
    --wit "$root/wit" --world-name "subs:agent/$world@$version" --out "$out"
