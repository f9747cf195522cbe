#!/usr/bin/env bash
# Rebuilds vendor/wasmtime from the published crate and our patch, or,
# with --check, says whether vendor/wasmtime is exactly that.
#
#   scripts/vendor-wasmtime.sh           # replace vendor/wasmtime
#   scripts/vendor-wasmtime.sh --check   # exit 1 if it differs
#
# The crate comes from crates.io (or cargo's download cache), checked
# against the SHA-256 crates.io's index publishes for it; the patch is
# vendor/wasmtime.patch (`patch -p1` inside the crate). To move to another
# release, set VERSION and CHECKSUM below, run the script, and fix the
# patch where it no longer applies. vendor/README.md says what the patch
# changes and why.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=48.0.10
CHECKSUM=8f47e5ae0d077a8415d626b028a1701fd4d4b3ed4d57e21a0b5daefe99ae81f1
PATCH=vendor/wasmtime.patch
TARGET=vendor/wasmtime

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
crate="$work/wasmtime-$VERSION.crate"

cached=$(compgen -G "${CARGO_HOME:-$HOME/.cargo}/registry/cache/*/wasmtime-$VERSION.crate" | head -n 1 || true)
if [[ -n "$cached" ]]; then
    cp "$cached" "$crate"
else
    url="https://static.crates.io/crates/wasmtime/wasmtime-$VERSION.crate"
    if command -v curl >/dev/null; then
        curl --fail --silent --show-error --location --retry 3 -o "$crate" "$url"
    else
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$crate"
    fi
fi
echo "$CHECKSUM  $crate" | sha256sum --check --quiet -

tar -xzf "$crate" -C "$work"
fresh="$work/wasmtime-$VERSION"
# Git's record of the commit it was published from: not source.
rm -f "$fresh/.cargo_vcs_info.json"
(cd "$fresh" && patch -p1 --quiet --no-backup-if-mismatch --forward < "$OLDPWD/$PATCH")

if $check; then
    if ! diff -r "$fresh" "$TARGET" >"$work/diff"; then
        echo "$TARGET is not wasmtime $VERSION with $PATCH applied:" >&2
        cat "$work/diff" >&2
        echo "run scripts/vendor-wasmtime.sh to rebuild it, or update $PATCH" >&2
        exit 1
    fi
    echo "$TARGET is wasmtime $VERSION with $PATCH"
else
    rm -rf "$TARGET"
    cp -r "$fresh" "$TARGET"
    echo "rebuilt $TARGET: wasmtime $VERSION with $PATCH"
fi
