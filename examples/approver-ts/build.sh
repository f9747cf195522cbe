#!/usr/bin/env bash
# `npm run build` with the pinned toolchain (package-lock.json), installed
# into node_modules by `npm ci` the first time (and whenever the lockfile
# changes); then copies the component to OUT when given.
#
#   ./build.sh [OUT]   # default: approver-ts.wasm
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-}
case $out in /* | '') ;; *) out=$PWD/$out ;; esac
cd "$here"
# A copy of the lockfile it was installed from marks node_modules as
# current: a changed pin reinstalls.
if ! cmp -s package-lock.json node_modules/.subs-package-lock.json; then
    npm ci --no-audit --no-fund
    cp package-lock.json node_modules/.subs-package-lock.json
fi
npm run --silent build
if [ -n "$out" ]; then
    mkdir -p "$(dirname "$out")"
    cp approver-ts.wasm "$out"
fi
