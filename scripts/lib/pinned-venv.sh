#!/usr/bin/env bash
# Creates (or reuses) a Python venv holding exactly the pins of one
# requirements file: the shared body of the setup scripts of the test tools
# and the LangGraph benchmark (scripts/api-tools/setup.sh,
# scripts/oci-tools/setup.sh, scripts/langgraph/setup.sh).
#
#   scripts/lib/pinned-venv.sh REQUIREMENTS VENV_DIR
#
# VENV_DIR is relative to the repository root unless absolute. $PYTHON picks
# the interpreter that creates the venv (default: python3, 3.10 or newer).
# A venv whose stored copy of requirements.txt matches is reused as is, so a
# second run takes a fraction of a second. The last line printed is the
# venv's python.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
requirements="$1"
venv="$2"
case "$venv" in
    /*) ;;
    *) venv="$root/$venv" ;;
esac
python="$venv/bin/python"
stamp="$venv/requirements.installed.txt"

# Tests running at once share the venv: one creates it, the others wait.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [[ -x "$python" && -f "$stamp" ]] && cmp -s "$requirements" "$stamp" && "$python" -c 'import sys' 2>/dev/null; then
    echo "$python"
    exit 0
fi

if [[ ! -x "$python" ]] || ! "$python" -c 'import sys' 2>/dev/null; then
    base="${PYTHON:-python3}"
    "$base" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "python 3.10 or newer is needed")'
    rm -rf "$venv"
    echo "creating venv $venv with $("$base" --version 2>&1)" >&2
    "$base" -m venv "$venv"
fi

rm -f "$stamp"
echo "installing $requirements" >&2
"$python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements" >&2
# Anything installed earlier and not pinned any more would make the venv differ
# from a fresh install: remove it.
extra="$("$python" -m pip freeze --disable-pip-version-check --exclude-editable \
    | sed -e 's/==.*//' -e 's/ @ .*//' | tr 'A-Z_.' 'a-z--' | sort -u \
    | comm -23 - <(grep -v '^#' "$requirements" | sed -e 's/\[.*\]//' -e 's/==.*//' | tr 'A-Z_.' 'a-z--' | sort -u))"
if [[ -n "$extra" ]]; then
    echo "removing packages not in requirements.txt: $(echo $extra)" >&2
    # shellcheck disable=SC2086
    "$python" -m pip uninstall --quiet --yes $extra >&2
fi
"$python" -m pip check >&2
cp "$requirements" "$stamp"
echo "$python"
