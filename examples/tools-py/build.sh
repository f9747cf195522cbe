#!/usr/bin/env bash
# Builds the agent as a component with the pinned componentize-py (default
# settings), installing it into .venv first if it is not there or its pin
# changed. The component is of the world subs:agent/agent@0.2.0, whose
# branch the SDK reads on demand; `--wit-version 0.1.0` builds it for the
# world of that version, which receives the whole branch with each request.
#
#   ./build.sh [--wit-version 0.2.0|0.1.0] [OUT]   # default OUT: <repo>/target/guests/py/tools_py.wasm
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.2.0
if [ "${1:-}" = --wit-version ]; then
    version=${2:?--wit-version takes 0.2.0 or 0.1.0}
    shift 2
fi
out=${1:-$root/target/guests/py/tools_py.wasm}
case $out in /*) ;; *) out=$PWD/$out ;; esac

venv=$here/.venv
# A copy of the requirements it was installed from marks a venv as
# current: a changed pin reinstalls.
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt"; then
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$venv/requirements.txt"
fi
mkdir -p "$(dirname "$out")"
cd "$here"
# The module `tools_agent` (its `WitWorld`), with the SDK from the repository
# on its path. componentize-py imports it at build time and snapshots the
# interpreter: modules imported only later, inside `decide`, are not there.
"$venv/bin/componentize-py" --wit-path "$root/wit" --world "subs:agent/agent@$version" --quiet \
    componentize tools_agent \
    --python-path "$here" --python-path "$root/guest-sdk/python/src" \
    --output "$out"
