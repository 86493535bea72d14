#!/usr/bin/env python3
"""Compare two benchmark result folders figure by figure.

Usage: bench/regress.py OLD_DIR NEW_DIR [--band PCT] [--only SUBSTRING ...] [--common]

Every line of the form ``bench key=value ...`` or ``mesh_bench NAME key=value ...`` in any ``*.txt``
under a folder is a figure. Its identity is the line's parameters (op, dtype, n, batch, clients,
variant, ...: names and whole numbers), not what the line measured beside its metric (times,
rates, fractions, ratios, any non-integer value; is_outcome); its value is the line's primary
metric: the first of ms, p50_us (lower is better), vectors_per_s, jobs_per_s, best_GBps,
samples_per_s (higher is better). Lines with none of those
are not figures. A figure that appears more than once in a folder (repeated runs) counts at its
best, and the spread of its repeats (worst / best - 1) is that folder's noise for it.

A figure is worse when NEW is slower than OLD by more than its band: the larger of --band (default
2 %) and the noise measured in either folder. The exit status is 1 when any figure is worse or
missing from NEW (with --common, figures of only one folder are listed and pass: a run of some
steps against a baseline of all of them), else 0; a table of every figure, its ratio (above 1: NEW
is faster) and its verdict is printed first.
"""
import argparse
import pathlib
import sys

LOWER = ("ms", "p50_us")
HIGHER = ("vectors_per_s", "jobs_per_s", "best_GBps", "samples_per_s")
# Outcomes and run lengths rather than parameters: never part of a figure's identity. Besides these
# names, a key with a unit of time, rate or error (OUTCOME_SUFFIXES), a ratio (`a_over_b`) or a
# non-integer value is an outcome: parameters are names and whole numbers, measurements are not,
# and a measurement in the identity would make every run's figure a new one, never compared.
NOT_IDENTITY = {
    "GBps", "roofline", "vs_health", "jobs", "batches", "seconds", "region_pinned", "speedup",
    "bytes_exchanged",
}
OUTCOME_SUFFIXES = ("_ms", "_us", "_s", "_fraction", "_GBps", "_gb_s", "_tb_s", "_per_s", "_err",
                    "_speedup")
# Ops whose n counts the samples a latency was taken over (qdpd_bench --jobs, python_bench.py's
# small jobs), where elsewhere n is the qubits: a run length there.
N_IS_SAMPLES = {"roundtrip", "py-small"}


def is_outcome(key, value, op):
    if key in NOT_IDENTITY or key.startswith("target") or key in LOWER + HIGHER:
        return True
    if key.endswith(OUTCOME_SUFFIXES) or "_over_" in key or (key == "n" and op in N_IS_SAMPLES):
        return True
    try:
        float(value)
    except ValueError:
        return False  # a name
    return not value.lstrip("-").isdigit()  # 1.5, 2.00, 1e+05: a measurement's notation


def parse_line(line):
    """Returns (identity, metric, value, lower_is_better) or None."""
    words = line.split()
    if not words or words[0] not in ("bench", "mesh_bench"):
        return None
    head = [words[0]]
    pairs = {}
    for w in words[1:]:
        if "=" in w:
            k, v = w.split("=", 1)
            pairs[k] = v
        elif not pairs:
            head.append(w)
    metric = next((m for m in LOWER + HIGHER if m in pairs), None)
    if metric is None:
        return None
    try:
        value = float(pairs[metric])
    except ValueError:
        return None
    op = pairs.get("op")
    ident = " ".join(head + [f"{k}={v}" for k, v in pairs.items() if not is_outcome(k, v, op)])
    return ident, metric, value, metric in LOWER


def load(folder, only):
    """Figures of a folder: identity -> (metric, best, worst, lower_is_better, count)."""
    figures = {}
    for path in sorted(pathlib.Path(folder).rglob("*.txt")):
        for line in path.read_text(errors="replace").splitlines():
            got = parse_line(line)
            if got is None or (only and not any(s in got[0] for s in only)):
                continue
            ident, metric, value, lower = got
            if ident in figures:
                m, best, worst, low, n = figures[ident]
                pick_best, pick_worst = (min, max) if low else (max, min)
                figures[ident] = (m, pick_best(best, value), pick_worst(worst, value), low, n + 1)
            else:
                figures[ident] = (metric, value, value, lower, 1)
    return figures


def spread(best, worst, lower):
    if best <= 0 or worst <= 0:
        return 0.0
    return worst / best - 1 if lower else best / worst - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--band", type=float, default=2.0, help="least noise band, percent (2)")
    ap.add_argument("--only", nargs="*", default=[], help="compare figures containing these only")
    ap.add_argument("--common", action="store_true",
                    help="a figure missing from NEW passes (compare those of both folders)")
    args = ap.parse_args()
    old, new = load(args.old, args.only), load(args.new, args.only)
    if not old:
        sys.exit(f"regress: no figures in {args.old}")
    failed = 0
    print(f"{'figure':<78} {'metric':>13} {'old':>11} {'new':>11} {'ratio':>7} {'band':>6}  verdict")
    for ident in sorted(set(old) | set(new)):
        if ident not in new:
            failed += not args.common
            print(f"{ident:<78} {old[ident][0]:>13} {old[ident][1]:>11.4g} {'-':>11} "
                  f"{'-':>7} {'-':>6}  {'not run' if args.common else 'MISSING'}")
            continue
        if ident not in old:
            print(f"{ident:<78} {new[ident][0]:>13} {'-':>11} {new[ident][1]:>11.4g} "
                  f"{'-':>7} {'-':>6}  new")
            continue
        metric, ob, ow, lower, on = old[ident]
        _, nb, nw, _, nn = new[ident]
        ratio = ob / nb if lower else nb / ob  # above 1: NEW is faster
        band = max(args.band / 100, spread(ob, ow, lower), spread(nb, nw, lower))
        worse = ratio < 1 / (1 + band)
        failed += worse
        print(f"{ident:<78} {metric:>13} {ob:>11.4g} {nb:>11.4g} {ratio:>7.3f} "
              f"{band * 100:>5.1f}%  {'WORSE' if worse else 'ok'} ({on}/{nn} runs)")
    print(f"regress: {len(old)} figures before, {len(new)} after, {failed} worse or missing")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
