#!/usr/bin/env bash
# Creates (or reuses) the Python venv for the LangGraph side of the HTTP
# benchmark and installs scripts/langgraph/requirements.txt into it.
#
#   scripts/langgraph/setup.sh [VENV_DIR]     (default: target/langgraph-venv)
#
# The venv is made by scripts/lib/pinned-venv.sh; the last line printed is
# its python.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../lib/pinned-venv.sh" "$here/requirements.txt" "${1:-target/langgraph-venv}"
