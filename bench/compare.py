#!/usr/bin/env python3
"""Joins qdpk_bench's output with torch_ref.py's and prints the comparison table: for each case
ours and PyTorch's time, the speed-up, our fraction of the memory roofline, the target from the
issue, and whether it is met.

Usage: compare.py QDPK_BENCH_OUTPUT TORCH_REF_OUTPUT
"""
import sys

# PyTorch and the earlier single-GPU implementation, as measured when the targets were set
# (samples/s for the batched cases).
PUBLISHED_TORCH = {10: 6.7e7, 16: 1.27e6, 20: 7.8e4}
EARLIER = {10: 6.5e7, 16: 1.40e6, 20: 8.8e4}


def parse(path):
    rows = {}
    variants = []
    with open(path) as f:
        for line in f:
            if not line.startswith("bench "):
                continue
            kv = dict(tok.split("=", 1) for tok in line.split()[1:] if "=" in tok)
            key = (kv["op"], kv["dtype"], int(kv["n"]), int(kv["batch"]))
            if "variant" in kv:
                variants.append((key, kv))
            else:
                rows[key] = kv
    return rows, variants


def target(key, ours, torch):
    """(text, met or None) for the cases the issue sets a target for."""
    op, dtype, n, batch = key
    ms = float(ours["ms"])
    roof = float(ours["roofline"])
    if op == "amplitude" and batch == 1 and dtype == "complex128":
        return "<=8.4 ms, >=0.95 roofline", ms <= 8.4 and roof >= 0.95
    if op == "amplitude" and batch == 1 and dtype == "complex64":
        return ">=0.95 roofline", roof >= 0.95
    if op == "amplitude" and batch > 1 and n in EARLIER:
        sps = float(ours["samples_per_s"])
        ref = max(EARLIER[n], PUBLISHED_TORCH[n])
        if torch is not None:
            ref = max(ref, float(torch["samples_per_s"]))
        return f">={1.3 * ref:.3g} samples/s (1.3x)", sps >= 1.3 * ref
    if op in ("angle", "phase"):
        return ">=0.85 write roofline", roof >= 0.85
    if op == "basis":
        return ">=0.95 fill bandwidth", roof >= 0.95
    if op == "iqp" and n in (20, 26):
        limit = {20: 0.27, 26: 26.8}[n] / 5
        return f"<={limit:.3g} ms (5x)", ms <= limit
    return "", None


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ours, variants = parse(sys.argv[1])
    theirs, _ = parse(sys.argv[2])
    head = (f"{'case':<34} {'qdp ms':>9} {'torch ms':>9} {'speedup':>8} {'GB/s':>8} "
            f"{'roofline':>8}  {'target':<30} met")
    print(head)
    print("-" * len(head))
    missed = 0
    for key, kv in ours.items():
        op, dtype, n, batch = key
        if op in ("copy", "fill"):
            print(f"{op + ' (reference bandwidth)':<34} {float(kv['ms']):9.3f} {'':>9} {'':>8} "
                  f"{float(kv['GBps']):8.1f}")
            continue
        name = f"{op} {dtype} n={n}" + (f" x{batch}" if batch > 1 else "")
        t = theirs.get(key)
        tms = f"{float(t['ms']):9.3f}" if t else f"{'-':>9}"
        speed = f"{float(t['ms']) / float(kv['ms']):7.2f}x" if t else f"{'-':>8}"
        text, met = target(key, kv, t)
        mark = "" if met is None else ("yes" if met else "NO")
        missed += met is False
        print(f"{name:<34} {float(kv['ms']):9.3f} {tms} {speed:>8} {float(kv['GBps']):8.1f} "
              f"{float(kv['roofline']):8.3f}  {text:<30} {mark}")
        if batch > 1:
            sps = float(kv["samples_per_s"])
            tsps = float(t["samples_per_s"]) if t else float("nan")
            print(f"{'':<34} samples/s: qdp {sps:.3g}, torch {tsps:.3g}")
    if variants:
        print("\nlaunch-shape variants (knobs of kernels/qdpk_tune.h; k = amplitudes per thread,"
              " j = sumsq loads in flight, s1 = evict-first cache hints):")
        for key, kv in variants:
            op, dtype, n, batch = key
            name = f"{op} {dtype} n={n}" + (f" x{batch}" if batch > 1 else "")
            print(f"  {name:<36} {kv['variant']:<12} {float(kv['ms']):9.4f} ms  "
                  f"roofline {float(kv['roofline']):.3f}")
    print(f"\ntargets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
