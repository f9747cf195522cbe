#!/usr/bin/env bash
# Type-checks src/agent.ts and builds it as a component of the agent-json
# world of subs:agent@0.2.0, with the pinned TypeScript, esbuild and
# componentize-js that examples/approver-ts/build.sh installs (from its
# package-lock.json): run that first (tests/build.rs does).
#
#   tests/mcp/agent-ts/build.sh OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: build.sh OUT}
case $out in /*) ;; *) out=$PWD/$out ;; esac
bin=$root/examples/approver-ts/node_modules/.bin
for tool in tsc esbuild componentize-js; do
    if [ ! -x "$bin/$tool" ]; then
        echo "no $tool in $bin: run examples/approver-ts/build.sh first" >&2
        exit 1
    fi
done
"$bin/tsc" -p "$here/tsconfig.json"
mkdir -p "$(dirname "$out")"
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
# As examples/approver-ts bundles: `subs-component` makes the SDK reach the
# engine's imports, which componentize-js binds. `@subs/sdk` resolves
# through tsconfig.json's `paths` to the SDK's directory, as it does for
# tsc; a directory reached that way is entered by its `main`, which the
# neutral platform reads only when asked.
"$bin/esbuild" "$here/src/agent.ts" --bundle --format=esm --platform=neutral \
    --tsconfig="$here/tsconfig.json" --main-fields=main --conditions=subs-component \
    --external:'subs:*' --external:'wasi:*' --log-level=warning --outfile="$bundle/agent.bundle.js"
"$bin/componentize-js" "$bundle/agent.bundle.js" \
    --wit "$root/wit" --world-name subs:agent/agent-json@0.2.0 --out "$out"
