#!/usr/bin/env python3
"""The PyTorch reference for bench/qdpk_bench: the obvious PyTorch code for each encoding that
qdpk_bench times, on the same GPU, timed the same way (CUDA events around each repetition after
warm-up, median), printed in the same line format:

    bench impl=torch op=amplitude dtype=complex128 n=30 batch=1 ms=12.61

Inputs are random and already on the GPU; batched cases rotate over 4 input sets, as qdpk_bench
does. bench/compare.py joins this output with qdpk_bench's.
"""
import math
import sys

import torch

DEV = torch.device("cuda", 0)


def median_ms(fn, warmup, reps):
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])


def report(op, dtype, n, batch, ms):
    line = f"bench impl=torch op={op} dtype={dtype} n={n} batch={batch} ms={ms:.4f}"
    if batch > 1:
        line += f" samples_per_s={batch / (ms * 1e-3):.4g}"
    print(line, flush=True)


def release():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---- the obvious PyTorch encodings ----------------------------------------------------------------

def amplitude(x, cdtype):
    """Normalize each row (the last dimension) and convert to complex."""
    if x.dim() == 1:
        return (x / torch.linalg.vector_norm(x)).to(cdtype)
    return (x / torch.linalg.vector_norm(x, dim=1, keepdim=True)).to(cdtype)


def angle(theta):
    """prod_k (b_k ? sin x_k : cos x_k), qubit k = bit k: grow the state one qubit at a time."""
    c, s = torch.cos(theta), torch.sin(theta)
    state = torch.ones(1, dtype=theta.dtype, device=theta.device)
    for k in range(theta.numel()):
        state = torch.cat((state * c[k], state * s[k]))
    return state.to(torch.complex128)


def phase(theta):
    """2^(-n/2) e^{i sum_k x_k b_k}: grow the state one qubit at a time."""
    n = theta.numel()
    e = torch.polar(torch.ones_like(theta), theta)
    state = torch.full((1,), 2.0 ** (-n / 2), dtype=torch.complex128, device=theta.device)
    for k in range(n):
        state = torch.cat((state, state * e[k]))
    return state


def basis(index, n):
    state = torch.zeros(1 << n, dtype=torch.complex128, device=DEV)
    state[index] = 1
    return state


def iqp(d, n):
    """2^-n sum_z (-1)^{z.b} e^{i theta(z)}: phases from the bit matrix, then a Walsh-Hadamard
    transform as n reshaped butterfly stages."""
    N = 1 << n
    bits = torch.arange(n, device=DEV)
    z = ((torch.arange(N, device=DEV)[:, None] >> bits) & 1).to(torch.float64)
    singles = d[:n]
    D = torch.zeros(n, n, dtype=torch.float64, device=DEV)
    iu = torch.triu_indices(n, n, offset=1, device=DEV)
    D[iu[0], iu[1]] = d[n:]
    theta = z @ singles + ((z @ D) * z).sum(dim=1)
    del z
    psi = torch.polar(torch.full_like(theta, 1.0 / N), theta)
    del theta
    for k in range(n):
        v = psi.view(-1, 2, 1 << k)
        a, b = v[:, 0], v[:, 1]
        psi = torch.stack((a + b, a - b), dim=1).reshape(-1)
    return psi


def main():
    print(f"torch {torch.__version__} device {torch.cuda.get_device_name(DEV)}", flush=True)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(1)

    def rand(*shape, dtype=torch.float64, lo=-1.0, hi=1.0):
        return torch.rand(*shape, dtype=dtype, device=DEV, generator=gen) * (hi - lo) + lo

    cases = []

    def case(fn):
        cases.append(fn)
        return fn

    @case
    def amplitude_c128():
        x = rand(1 << 30)
        ms = median_ms(lambda i: amplitude(x, torch.complex128), 2, 10)
        report("amplitude", "complex128", 30, 1, ms)

    @case
    def amplitude_c64():
        x = rand(1 << 30, dtype=torch.float32)
        ms = median_ms(lambda i: amplitude(x, torch.complex64), 2, 10)
        report("amplitude", "complex64", 30, 1, ms)

    @case
    def amplitude_batches():
        for rows, n in ((4096, 10), (1024, 16), (64, 20)):
            xs = [rand(rows, 1 << n) for _ in range(4)]
            ms = median_ms(lambda i: amplitude(xs[i % 4], torch.complex128), 3, 200)
            report("amplitude", "complex128", n, rows, ms)
            del xs
            release()

    @case
    def angle_30():
        theta = rand(30, lo=-math.pi, hi=math.pi)
        report("angle", "complex128", 30, 1, median_ms(lambda i: angle(theta), 2, 10))

    @case
    def phase_30():
        theta = rand(30, lo=-math.pi, hi=math.pi)
        report("phase", "complex128", 30, 1, median_ms(lambda i: phase(theta), 2, 10))

    @case
    def basis_30():
        ms = median_ms(lambda i: basis(123456789, 30), 2, 10)
        report("basis", "complex128", 30, 1, ms)

    @case
    def iqp_20_26():
        for n, reps in ((20, 20), (26, 3)):
            d = rand(n + n * (n - 1) // 2)
            report("iqp", "complex128", n, 1, median_ms(lambda i: iqp(d, n), 1, reps))
            release()

    rc = 0
    for fn in cases:
        try:
            fn()
        except Exception as e:  # one failing case must not hide the others
            print(f"error case={fn.__name__} {type(e).__name__}: {e}", flush=True)
            rc = 1
        release()
    return rc


if __name__ == "__main__":
    sys.exit(main())
