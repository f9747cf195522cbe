#!/usr/bin/env bash
# The JavaScript guide's build as a reader types it, in an empty directory:
# the blocks of docs/guests/js.md marked `<!-- js-guide: file NAME -->` are
# written to NAME, and those marked `<!-- js-guide: run -->` are run in
# order with `SUBS` set to this source tree (as the guide asks the reader
# to set it). No lockfile and nothing else of the tree is there: whatever
# the steps need but do not pin or install fails here. Then `subs run`
# runs the component they built for one turn, and its tool must answer.
#
#   scripts/js-guide.sh [SUBS]   # the subs binary; default: target/debug/subs
#                                # (built as scripts/demo.sh builds it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
guide=$root/docs/guests/js.md
subs=${1:-}
if [ -z "$subs" ]; then
    # The binary `cargo test --workspace` builds: nothing to compile after it.
    subs=${CARGO_TARGET_DIR:-target}/debug/subs
    [ -x "$subs" ] || cargo build --workspace --bins
fi
subs=$(cd "$(dirname "$subs")" && pwd)/$(basename "$subs")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
project=$tmp/project
steps=$tmp/steps.sh
mkdir "$project"
: >"$steps"

# A marker applies to the fenced block on the next line; a marker not
# followed by one, a file name with a path in it, or a block left open is
# an error in the guide.
awk -v project="$project" -v steps="$steps" '
    function fail(message) { printf "%s:%d: %s\n", FILENAME, FNR, message > "/dev/stderr"; failed = 1; exit 1 }
    inblock && /^```[ \t]*$/ { inblock = 0; blocks++; next }
    inblock { print > out; next }
    marked {
        if ($0 !~ /^```/) fail("a js-guide marker must be followed by a fenced block")
        marked = 0; inblock = 1; next
    }
    /^<!-- js-guide: run -->[ \t]*$/ { out = steps; marked = 1; runs++; next }
    /^<!-- js-guide: file [^ \/]+ -->[ \t]*$/ {
        name = $0
        sub(/^<!-- js-guide: file /, "", name)
        sub(/ -->[ \t]*$/, "", name)
        if (name == "." || name == "..") fail("a js-guide file names a file of the directory")
        out = project "/" name; marked = 1; files++; next
    }
    /<!-- js-guide:/ { fail("not a js-guide marker: `<!-- js-guide: run -->` or `<!-- js-guide: file NAME -->`") }
    END {
        if (failed) exit 1
        if (marked || inblock) { print FILENAME ": the last js-guide block is not closed" > "/dev/stderr"; exit 1 }
        if (!runs || !files) { print FILENAME ": no js-guide run or file blocks" > "/dev/stderr"; exit 1 }
        printf "js-guide: %d file(s) and %d run block(s) from %s\n", files, runs, FILENAME
    }
' "$guide"

echo "js-guide: in $project:"
sed 's/^/    /' "$steps"
started=$SECONDS
(cd "$project" && SUBS=$root bash -euo pipefail "$steps")
echo "js-guide: the guide's steps took $((SECONDS - started)) s"

wasm=$project/agent.wasm
[ -s "$wasm" ] || { echo "js-guide: the guide's steps built no agent.wasm" >&2; exit 1; }
out=$("$subs" run "$wasm" 'use tool add with {"a": 1, "b": 2}')
printf '%s\n' "$out"
grep -qF '← add: {"sum":3}' <<<"$out" || { echo "js-guide: the built agent did not run its add tool" >&2; exit 1; }
echo "js-guide: ok in $SECONDS s"
