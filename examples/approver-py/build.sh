#!/usr/bin/env bash
# Builds the agent into approver-py.wasm with the pinned componentize-py,
# installed into .venv the first time (and whenever the pin changes), for
# the world subs:agent/agent@0.2.0 (`--wit-version 0.1.0`: that version's).
#
#   ./build.sh [--wit-version 0.2.0|0.1.0] [OUT]   # default OUT: approver-py.wasm
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=0.2.0
if [ "${1:-}" = --wit-version ]; then
    version=${2:?--wit-version takes 0.2.0 or 0.1.0}
    shift 2
fi
# The subs source tree this example is in: its SDK and world.
sdk=$(cd "$here/../.." && pwd)
out=${1:-$here/approver-py.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cpy=${COMPONENTIZE_PY:-}
if [ -z "$cpy" ]; then
    venv=$here/.venv
    if ! cmp -s "$sdk/guest-sdk/python/requirements-build.txt" "$venv/requirements.txt"; then
        rm -rf "$venv"
        "${PYTHON:-python3}" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$sdk/guest-sdk/python/requirements-build.txt"
        cp "$sdk/guest-sdk/python/requirements-build.txt" "$venv/requirements.txt"
    fi
    cpy=$venv/bin/componentize-py
fi
mkdir -p "$(dirname "$out")"
cd "$here"
"$cpy" --wit-path "$sdk/wit" --world "subs:agent/agent@$version" --quiet \
    componentize agent --python-path "$here" --python-path "$sdk/guest-sdk/python/src" --output "$out"
