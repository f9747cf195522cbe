#!/usr/bin/env bash
# Regenerates the componentize-py bindings of the subs:agent world that the
# native tests convert to and from (tests/bindings/): the `types`, `host` and `branch`
# modules, as componentize-py generates them inside every component.
#
#   scripts/bindings.sh     # needs componentize-py (requirements-build.txt)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$(cd "$here/../.." && pwd)
cpy=${COMPONENTIZE_PY:-componentize-py}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cpy" -d "$root/wit" -w agent bindings "$tmp"
out="$here/tests/bindings"
rm -rf "$out"
mkdir -p "$out/wit_world/imports"
cp "$tmp/componentize_py_types.py" "$out/"
cp "$tmp/wit_world/__init__.py" "$out/wit_world/"
cp "$tmp/wit_world/imports/__init__.py" "$tmp/wit_world/imports/subs_agent_types.py" \
    "$tmp/wit_world/imports/host.py" "$tmp/wit_world/imports/branch.py" "$out/wit_world/imports/"
echo "wrote $out"
