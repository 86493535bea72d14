"""The encodings as torch autograd functions (qdp.torch.encode): qdpd encodes in the forward pass,
and the backward pass (the vector-Jacobian product) is each encoding's closed form, computed by
torch on the device that holds the state, from the state itself and the incoming gradient.

For a real loss L of the state psi (complex) of real values x, torch hands back g = dL/dconj(psi)
(its convention for complex tensors), and dL/dx_k = Re sum_b conj(dpsi_b/dx_k) g_b. Per encoding:

- amplitude: psi = x / ||x|| (padded): dL/dx = (Re g - psi <psi, Re g>) / ||x|| on the values;
- angle: psi_b = prod_k f_k(b_k), f = (cos x_k, sin x_k): dL/dx_k contracts Re g with every f_j
  but the k-th, and with f_k' = (-sin x_k, cos x_k), all k at once by halving the qubits;
- phase: dpsi_b/dx_k = i b_k psi_b: dL/dx_k = sum over b with bit k of Im(conj(psi_b) g_b);
- iqp, iqp-z: psi = 2^-n WHT(e^{i theta}); the transform is its own inverse up to 2^n, so
  e^{i theta} = WHT(psi), and dL/dd = sum_z (d theta(z)/dd) Im(conj(e^{i theta(z)}) G_z) with
  G = 2^-n WHT(g): for a single d_i that is z_i, for a pair term z_i z_j;
- basis: its values are indices; it has no gradient and refuses a tensor that asks for one.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from .errors import NotSupported


def _bits(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """[2^n][n]: bit k of each index b."""
    b = torch.arange(1 << n, device=device)
    return ((b[:, None] >> torch.arange(n, device=device)) & 1).to(dtype)


def _wht(v: torch.Tensor, n: int) -> torch.Tensor:
    """The unnormalized Walsh-Hadamard transform of each row of v ([rows][2^n])."""
    rows = v.shape[0]
    for k in range(n):
        w = v.reshape(rows, 1 << (n - 1 - k), 2, 1 << k)
        v = torch.stack((w[:, :, 0] + w[:, :, 1], w[:, :, 0] - w[:, :, 1]), dim=2)
    return v.reshape(rows, 1 << n)


def _kron(f: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """The product vector of qubits [lo, hi) of f ([rows][n][2]), indexed by their bits, qubit lo
    the lowest: [rows][2^(hi-lo)]."""
    v = f[:, lo]
    for k in range(lo + 1, hi):
        v = (f[:, k, :, None] * v[:, None, :]).reshape(v.shape[0], -1)
    return v


def _all_but_one(t: torch.Tensor, f: torch.Tensor, fd: torch.Tensor, lo: int,
                 hi: int) -> torch.Tensor:
    """For each qubit k of [lo, hi): t ([rows][2^(hi-lo)], qubit lo the lowest bit) contracted with
    f of every other qubit of the range and with fd of k: [rows][hi-lo]. Halving the range each
    time costs two passes over t in all, not one per qubit."""
    if hi - lo == 1:
        return (t * fd[:, lo]).sum(dim=1, keepdim=True)
    mid = (lo + hi) // 2
    t3 = t.reshape(t.shape[0], 1 << (hi - mid), 1 << (mid - lo))  # [rows][high][low]
    low = torch.einsum("rhl,rh->rl", t3, _kron(f, mid, hi))
    high = torch.einsum("rhl,rl->rh", t3, _kron(f, lo, mid))
    return torch.cat((_all_but_one(low, f, fd, lo, mid), _all_but_one(high, f, fd, mid, hi)),
                     dim=1)


def _angle(x: torch.Tensor, psi: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    re = g.real
    c, s = torch.cos(x).to(re.dtype), torch.sin(x).to(re.dtype)
    f = torch.stack((c, s), dim=2)     # [rows][n][2]: f_k(0), f_k(1)
    fd = torch.stack((-s, c), dim=2)   # their derivatives
    return _all_but_one(re, f, fd, 0, n)


def _amplitude(x: torch.Tensor, psi: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    m = x.shape[1]
    re = g.real
    p = psi.real
    norm = torch.linalg.vector_norm(x.to(re.dtype), dim=1, keepdim=True)
    dot = (re * p).sum(dim=1, keepdim=True)
    return (re[:, :m] - p[:, :m] * dot) / norm


def _phase(x: torch.Tensor, psi: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    t = (psi.conj() * g).imag
    return t @ _bits(n, t.device, t.dtype)


def _iqp(x: torch.Tensor, psi: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    e = _wht(psi, n)                  # e^{i theta(z)}
    gh = _wht(g, n) / float(1 << n)   # 2^-n WHT(g)
    u = (e.conj() * gh).imag          # [rows][2^n]
    bits = _bits(n, u.device, u.dtype)
    singles = u @ bits
    if x.shape[1] == n:               # iqp-z
        return singles
    pairs = [bits[:, i] * bits[:, j] for i in range(n) for j in range(i + 1, n)]
    return torch.cat((singles, u @ torch.stack(pairs, dim=1)), dim=1)


_VJP = {"amplitude": _amplitude, "angle": _angle, "phase": _phase, "iqp": _iqp, "iqp-z": _iqp}


def _device(x: torch.Tensor) -> str:
    """qdp.encode's device for a result beside x."""
    if not x.is_cuda:
        return "cpu"
    return f"cuda:{x.device.index if x.device.index is not None else torch.cuda.current_device()}"


class Encode(torch.autograd.Function):
    """qdpd's encode forward; the encoding's closed-form vector-Jacobian product backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, encoding: str, qubits: int,
                dtype: Optional[str]) -> torch.Tensor:
        from ._functions import encode

        device = _device(x)
        values = x.detach() if x.is_cuda else x.detach().numpy()
        psi = encode(values, encoding, qubits, dtype=dtype, device=device)
        ctx.encoding, ctx.qubits, ctx.one = encoding, qubits, x.dim() == 1
        ctx.save_for_backward(x, psi)
        return psi

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None, None]:
        x, psi = ctx.saved_tensors
        x2, psi2, g2 = (x[None], psi[None], g[None]) if ctx.one else (x, psi, g)
        grad = _VJP[ctx.encoding](x2, psi2.to(g2.dtype), g2, ctx.qubits).to(x.dtype)
        return (grad[0] if ctx.one else grad), None, None, None


def encode(x: torch.Tensor, encoding: str, qubits: int, *, dtype: Optional[str] = None) -> Any:
    """The state of ``x`` as :func:`qdp.encode` makes it, differentiable with respect to x.

    Parameters
    ----------
    x : torch.Tensor
        One sample (1-D) or a batch (2-D) of real values, on the CPU or on one of the daemon's
        GPUs; it may require grad.
    encoding, qubits, dtype
        As :func:`qdp.encode` takes them; basis has no gradient.

    Returns
    -------
    torch.Tensor
        The state on x's device, complex128 by default, that carries x's gradient: ``backward``
        of any real loss of it fills ``x.grad``.

    Raises
    ------
    NotSupported
        Basis encoding of a tensor that requires grad.
    """
    if encoding not in _VJP:
        if encoding == "basis" and x.requires_grad:
            raise NotSupported("basis encoding has no gradient: its values are indices; pass a "
                               "tensor that does not require grad (x.detach())",
                               field="encoding")
        from ._functions import encode as plain

        device = _device(x)
        return plain(x if x.is_cuda else x.numpy(), encoding, qubits, dtype=dtype, device=device)
    return Encode.apply(x, encoding, qubits, dtype)
