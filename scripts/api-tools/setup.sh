#!/usr/bin/env bash
# Creates (or reuses) the Python venv of the API tests' tools (OpenAPI
# validation, client generation, OTLP decoding) and installs
# scripts/api-tools/requirements.txt into it.
#
#   scripts/api-tools/setup.sh [VENV_DIR]     (default: target/api-tools-venv)
#
# The venv is made by scripts/lib/pinned-venv.sh; the last line printed is
# its python.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../lib/pinned-venv.sh" "$here/requirements.txt" "${1:-target/api-tools-venv}"
