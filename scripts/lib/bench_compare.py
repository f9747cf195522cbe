"""Compares the bench runs scripts/bench-compare.sh kept.

    python3 scripts/lib/bench_compare.py RUNS_DIR BENCH...

RUNS_DIR holds `<bench>-<side>-<round>.json` (side `base` or `head`).
Every number of a bench's JSON is a figure, named by its path (a list
of numbers is one figure, its best sample): a list of rows is keyed by
each row's dimensions (its text fields and the counts that say what was
measured, such as `clients` or `sessions`), not by its position. A
figure's direction comes from its name: rates (`per_sec`) are better
higher; times and sizes (`_us`, `_ms`, `p50`, `bytes`, `rss`) better
lower; tails (`p90`, `p99`, `worst`, `max`: on a shared machine, a
run's worst stretch), ratios of two figures (`_over_`), totals of a
timed run (`stored_bytes`, `commits`) and any other number are shown
without a verdict. Each side's figure is its best run (a shared machine
only ever slows a run down); a figure more than 5% worse on head is
flagged. Exits 1 when one is.
"""

import json
import re
import sys
from pathlib import Path

# Row fields that say what a row measured rather than what it found.
DIMENSIONS = {
    "case", "server", "backend", "world", "agent", "language", "kind",
    "clients", "callers", "sessions", "length", "messages", "tenant_slots",
    "sleepers", "turns_per_session", "new_connections", "level",
}
# Settings echoed at the top of a bench's JSON: the same on both sides,
# not figures. Inside a row the same names can be figures (a load's
# `seconds`).
SETTINGS = {"seconds", "rounds", "runs", "components", "decisions", "turns", "slots", "cores", "block", "bench"}
# Totals that grow with how much work a timed run got done, not costs.
TOTALS = {"stored_bytes", "file_bytes", "commits", "batches"}
THRESHOLD = 0.05


def direction(name):
    """+1 when higher is better, -1 when lower is, 0 when unknown."""
    leaf = name.rsplit(".", 1)[-1]
    # Ratios of two figures (which side is better depends on the pair) and
    # totals that grow with the work a timed run got done.
    if "_over_" in leaf or leaf in TOTALS or leaf.endswith("_cost_us_p50"):
        return 0
    # Tails: on a shared machine a run's p99 is its worst stretch.
    if re.search(r"(p99|p90|worst|max)", leaf):
        return 0
    if "per_sec" in leaf or "per_s_" in leaf or leaf.endswith("_per_s"):
        return 1
    if re.search(r"(_us|_ms|_s)(_|$)|seconds|bytes|kib|rss|p50|latency", leaf):
        return -1
    return 0


def key_of(row, index):
    dims = [f"{k}={row[k]}" for k in sorted(row) if k in DIMENSIONS and not isinstance(row[k], (dict, list))]
    return "[" + ",".join(dims) + "]" if dims else f"[{index}]"


def flatten(value, prefix, out):
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (int, float)) and (k in DIMENSIONS or (not prefix and k in SETTINGS)):
                continue
            flatten(v, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        # A run's samples (replay's rounds): its best one, as for runs.
        out[prefix] = float(best(value, direction(prefix) or -1))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            key = key_of(v, i) if isinstance(v, dict) else f"[{i}]"
            flatten(v, prefix + key, out)


def best(values, sign):
    return min(values) if sign < 0 else max(values)


def main():
    runs = Path(sys.argv[1])
    benches = sys.argv[2:]
    worse = []
    for bench in benches:
        sides = {"base": [], "head": []}
        for path in sorted(runs.glob(f"{bench}-*-*.json")):
            side = path.stem[len(bench) + 1:].split("-")[0]
            if side in sides:
                figures = {}
                flatten(json.loads(path.read_text()), "", figures)
                sides[side].append(figures)
        if not sides["base"] or not sides["head"]:
            print(f"\n## {bench}: no runs on {'base' if not sides['base'] else 'head'}")
            continue
        names = [n for n in sides["head"][0] if all(n in r for s in sides.values() for r in s)]
        only = sorted(set().union(*sides["head"], *sides["base"]) - set(names))
        print(f"\n## {bench} ({len(sides['base'])} runs each)\n")
        print("| figure | base | head | head / base | |")
        print("| --- | --- | --- | --- | --- |")
        for name in names:
            sign = direction(name)
            b = best([r[name] for r in sides["base"]], sign or -1)
            h = best([r[name] for r in sides["head"]], sign or -1)
            ratio = h / b if b else float("nan")
            verdict = ""
            if sign and b:
                change = (h - b) / abs(b) * (1 if sign > 0 else -1)
                if change < -THRESHOLD:
                    verdict = f"**{-change:.0%} worse**"
                    worse.append(f"{bench}: {name}")
                elif change > THRESHOLD:
                    verdict = f"{change:.0%} better"
            print(f"| {name} | {b:.4g} | {h:.4g} | {ratio:.3f} | {verdict} |")
        if only:
            print(f"\nOn one side only: {', '.join(only)}")
    print()
    if worse:
        print(f"{len(worse)} figures more than {THRESHOLD:.0%} worse on head:")
        for w in worse:
            print(f"- {w}")
        sys.exit(1)
    print(f"No figure is more than {THRESHOLD:.0%} worse on head.")


if __name__ == "__main__":
    main()
