#!/usr/bin/env bash
# Builds the test agent MODULE of this directory as a component, with the
# componentize-py (default settings) that examples/tools-py/build.sh
# installs: run that first (tests/build.rs does).
#
#   tests/python/build.sh MODULE OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
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
"$cpy" --wit-path "$root/wit" --world subs:agent/agent@0.1.0 --quiet \
    componentize "$module" \
    --python-path "$here" --python-path "$root/guest-sdk/python/src" \
    --output "$out"
