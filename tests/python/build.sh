#!/usr/bin/env bash
# Builds the test agent MODULE of this directory as a component, with the
# componentize-py (default settings) that examples/tools-py/build.sh
# installs: run that first (tests/build.rs does).
#
# The world is subs:agent/agent@0.2.0 unless --wit-version names another.
#
#   tests/python/build.sh [--wit-version 0.2.0|0.1.0] MODULE OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.2.0
if [ "${1:-}" = --wit-version ]; then
    version=${2:?--wit-version takes 0.2.0 or 0.1.0}
    shift 2
fi
module=$1
out=$2
case $out in /*) ;; *) out=$PWD/$out ;; esac
cpy=$root/examples/tools-py/.venv/bin/componentize-py
if [ ! -x "$cpy" ]; then
    echo "no componentize-py at $cpy: run examples/tools-py/build.sh first" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
cd "$here"
"$cpy" --wit-path "$root/wit" --world "subs:agent/agent@$version" --quiet \
    componentize "$module" \
    --python-path "$here" --python-path "$root/guest-sdk/python/src" \
    --output "$out"
