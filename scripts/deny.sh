#!/usr/bin/env bash
# cargo deny check: advisories, bans, licenses and sources (deny.toml).
#
# Advisories come from the RustSec database snapshot in vendor/advisory-db
# rather than a clone of it: CI reaches crates.io but not GitHub.
# cargo-deny reads a database as a git checkout, so the snapshot is made
# one here, its commit dated as the snapshot is (deny.toml bounds how old
# that may be). vendor/advisory-db/README.md says how to refresh it.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
SNAPSHOT_COMMIT=$(sed -n 's/^commit: //p' vendor/advisory-db/README.md)
SNAPSHOT_DATE=$(sed -n 's/^date: //p' vendor/advisory-db/README.md)
# Where cargo-deny looks for the database of deny.toml's db-urls entry.
db=target/advisory-dbs/advisory-db-3157b0e258782691

if [[ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $DENY_VERSION" ]]; then
    cargo install --locked cargo-deny --version "$DENY_VERSION"
fi

rm -rf "$db"
mkdir -p "$db"
cp -r vendor/advisory-db/crates vendor/advisory-db/rust "$db"/
git -C "$db" init --quiet
git -C "$db" add --all
GIT_AUTHOR_DATE="$SNAPSHOT_DATE" GIT_COMMITTER_DATE="$SNAPSHOT_DATE" \
    git -C "$db" -c user.name=subs -c user.email=ci@subs.invalid \
    commit --quiet --message "RustSec advisory-db at $SNAPSHOT_COMMIT"

# The graph's crates must be on disk for an offline check.
cargo fetch --locked --quiet
cargo deny --offline check "$@"
