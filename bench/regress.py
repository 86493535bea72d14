#!/usr/bin/env python3
"""Compare two benchmark runs figure by figure, or write a run's compact baseline.

Usage: bench/regress.py OLD NEW [--band PCT] [--only SUBSTRING ...] [--common]
       bench/regress.py --summarize RUN [RUN ...] > bench/baselines/KIND.txt

OLD and NEW are each a folder of a run's outputs or one file (a compact baseline). Every line of
the form ``bench key=value ...`` or ``mesh_bench NAME key=value ...`` in any ``*.txt`` under a
folder, or in the file, is a figure. Its identity is the line's parameters (op, dtype, n, batch,
clients, variant, ...: names and whole numbers), not what the line measured beside its metric
(times, rates, fractions, ratios, any non-integer value; is_outcome); its value is the line's
primary metric: the first of ms, p50_us (lower is better), vectors_per_s, jobs_per_s, best_GBps,
samples_per_s (higher is better). Lines with none of those are not figures. A figure that
appears more than once in a folder (repeated runs) counts at its best, and the spread of its
repeats (worst / best - 1) is that folder's noise for it.

A compact baseline (bench/baselines/KIND.txt) holds each figure once: its line's parameters, its
metric at its best and, when it was measured more than once, ``worst=`` (the same metric at its
worst) and ``runs=`` (how many repeats), so that its noise band travels with it. ``--summarize``
writes one from the runs it should hold (docs/performance.md, "The regression gate").

A figure is worse when NEW is slower than OLD by more than its band: the larger of --band (default
2 %) and the noise measured in either folder. The exit status is 1 when any figure is worse or
missing from NEW (with --common, figures of only one folder are listed and pass: a run of some
steps against a baseline of all of them), else 0; a table of every figure, its ratio (above 1: NEW
is faster) and its verdict is printed first.
"""
import argparse
import pathlib
import sys
import textwrap
from typing import Dict, List, Optional, Tuple

# A figure: (metric, best, worst, lower_is_better, repeats).
Figure = Tuple[str, float, float, bool, int]

LOWER = ("ms", "p50_us")
HIGHER = ("vectors_per_s", "jobs_per_s", "best_GBps", "samples_per_s")
# Outcomes and run lengths rather than parameters: never part of a figure's identity. Besides these
# names, a key with a unit of time, rate or error (OUTCOME_SUFFIXES), a ratio (`a_over_b`) or a
# non-integer value is an outcome: parameters are names and whole numbers, measurements are not,
# and a measurement in the identity would make every run's figure a new one, never compared.
NOT_IDENTITY = {
    "GBps", "roofline", "vs_health", "jobs", "batches", "seconds", "region_pinned", "speedup",
    "bytes_exchanged", "worst", "runs",  # the last two: a compact baseline's noise (see above)
}
OUTCOME_SUFFIXES = ("_ms", "_us", "_s", "_fraction", "_GBps", "_gb_s", "_tb_s", "_per_s", "_err",
                    "_speedup")
# Ops whose n counts the samples a latency was taken over (qdpd_bench --jobs, python_bench.py's
# small jobs), where elsewhere n is the qubits: a run length there.
N_IS_SAMPLES = {"roundtrip", "py-small"}


def is_outcome(key: str, value: str, op: Optional[str]) -> bool:
    if key in NOT_IDENTITY or key.startswith("target") or key in LOWER + HIGHER:
        return True
    if key.endswith(OUTCOME_SUFFIXES) or "_over_" in key or (key == "n" and op in N_IS_SAMPLES):
        return True
    try:
        float(value)
    except ValueError:
        return False  # a name
    return not value.lstrip("-").isdigit()  # 1.5, 2.00, 1e+05: a measurement's notation


def parse_line(line: str) -> Optional[Tuple[str, Figure]]:
    """The figure of a line, or None when the line is none.

    Returns
    -------
    (identity, figure), the figure one run's (best = worst, 1 repeat) unless the line is a compact
    baseline's (``worst=`` and ``runs=``).

    Raises
    ------
    ValueError
        A compact line whose worst or runs is missing, not a number, or better than its best.
    """
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
    lower = metric in LOWER
    if "worst" not in pairs and "runs" not in pairs:
        return ident, (metric, value, value, lower, 1)
    try:
        worst, runs = float(pairs["worst"]), int(pairs["runs"])
    except (KeyError, ValueError):
        given = f"worst={pairs.get('worst', '(none)')} runs={pairs.get('runs', '(none)')}"
        raise ValueError(f"{given}: a compact figure needs both, worst a number and runs a whole "
                         "number (write the baseline with bench/regress.py --summarize)") from None
    if runs < 2 or (worst < value if lower else worst > value):
        raise ValueError(f"worst={pairs['worst']} runs={pairs['runs']}: worst must be no better "
                         f"than {metric}={pairs[metric]}, and runs at least 2")
    return ident, (metric, value, worst, lower, runs)


def load(path: str, only: List[str]) -> Dict[str, Figure]:
    """The figures of a run's folder (its ``*.txt``) or of one file, by identity."""
    figures = {}
    for txt in files(path):
        try:
            text = txt.read_text(errors="replace")
        except OSError as e:
            sys.exit(f"regress: cannot read {txt}: {e.strerror} (a link to a file that is gone?)")
        for lineno, line in enumerate(text.splitlines(), 1):
            try:
                got = parse_line(line)
            except ValueError as e:
                sys.exit(f"regress: {txt}:{lineno}: {e}")
            if got is not None and (not only or any(s in got[0] for s in only)):
                add(figures, *got)
    return figures


def files(path: str) -> List[pathlib.Path]:
    """The file path names, or the ``*.txt`` under the folder it names."""
    root = pathlib.Path(path)
    if not root.exists():
        sys.exit(f"regress: {path} does not exist: give a run's folder or a baseline file")
    return [root] if root.is_file() else sorted(root.rglob("*.txt"))


def add(figures: Dict[str, Figure], ident: str, figure: Figure) -> None:
    """Counts figure's repeats into figures[ident]: the best and the worst of them all."""
    if ident not in figures:
        figures[ident] = figure
        return
    metric, best, worst, lower, n = figures[ident]
    pick_best, pick_worst = (min, max) if lower else (max, min)
    figures[ident] = (metric, pick_best(best, figure[1]), pick_worst(worst, figure[2]), lower,
                      n + figure[4])


def summarize(paths: List[str]) -> None:
    """Prints the compact baseline of the runs in paths (folders or files): one line per figure,
    sorted, each at its best, with its worst and its repeats when there were several."""
    figures = {}
    for path in paths:
        for ident, figure in load(path, []).items():
            add(figures, ident, figure)
    if not figures:
        sys.exit(f"regress: no figures in {' '.join(paths)}")
    print(f"# {len(figures)} figures at their best; worst= and runs=: the spread of their repeats "
          "(regress.py --summarize)")
    for path in paths:
        root = pathlib.Path(path)
        names = [root.name] if root.is_file() else [str(f.relative_to(root)) for f in files(path)]
        print(textwrap.fill(" ".join(names), 100, initial_indent=f"# from {root.name}: ",
                            subsequent_indent="#   ", break_on_hyphens=False))
    for ident in sorted(figures):
        metric, best, worst, _, n = figures[ident]
        noise = f" worst={worst:.10g} runs={n}" if n > 1 else ""
        print(f"{ident} {metric}={best:.10g}{noise}")


def spread(best: float, worst: float, lower: bool) -> float:
    if best <= 0 or worst <= 0:
        return 0.0
    return worst / best - 1 if lower else best / worst - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s [options] OLD NEW | --summarize RUN [RUN ...]")
    ap.add_argument("paths", nargs="+", metavar="PATH",
                    help="OLD and NEW: a run's folder or a baseline file each (with --summarize: "
                         "the runs the baseline should hold)")
    ap.add_argument("--band", type=float, default=2.0, help="least noise band, percent (2)")
    ap.add_argument("--only", nargs="*", default=[], help="compare figures containing these only")
    ap.add_argument("--common", action="store_true",
                    help="a figure missing from NEW passes (compare those of both folders)")
    ap.add_argument("--summarize", action="store_true",
                    help="print the compact baseline of the RUN folders (or files) given")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.paths)
        return
    if len(args.paths) != 2:
        ap.error(f"give OLD and NEW (got {len(args.paths)} paths), or --summarize RUN ...")
    old, new = load(args.paths[0], args.only), load(args.paths[1], args.only)
    if not old:
        sys.exit(f"regress: no figures in {args.paths[0]}")
    failed = 0
    print(f"{'figure':<78} {'metric':>13} {'old':>11} {'new':>11} {'ratio':>7} {'band':>6}  "
          "verdict")
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
        # At the band's edge (NEW equal to OLD's slowest repeat) a figure passes, whatever the last
        # bits of the divisions or of a compact baseline's 10 digits.
        worse = ratio * (1 + band) < 1 - 1e-9
        failed += worse
        print(f"{ident:<78} {metric:>13} {ob:>11.4g} {nb:>11.4g} {ratio:>7.3f} "
              f"{band * 100:>5.1f}%  {'WORSE' if worse else 'ok'} ({on}/{nn} runs)")
    print(f"regress: {len(old)} figures before, {len(new)} after, {failed} worse or missing")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
