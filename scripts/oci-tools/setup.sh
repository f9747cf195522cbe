#!/usr/bin/env bash
# Creates (or reuses) the Python venv of the OCI registry tests' tools
# (oras) and installs scripts/oci-tools/requirements.txt into it.
#
#   scripts/oci-tools/setup.sh [VENV_DIR]     (default: target/oci-tools-venv)
#
# The venv is made by scripts/lib/pinned-venv.sh; the last line printed is
# its python.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../lib/pinned-venv.sh" "$here/requirements.txt" "${1:-target/oci-tools-venv}"
