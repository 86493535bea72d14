"""The encodings as torch autograd functions (qdp.torch.encode): qdpd encodes in the forward pass,
and the backward pass (the vector-Jacobian product) is each encoding's closed form, computed by
torch on the device that holds the state, from the state itself and the incoming gradient.

For a real loss L of the state psi (complex) of real values x, torch hands back g = dL/dconj(psi)
(its convention for complex tensors), and dL/dx_k = Re sum_b conj(dpsi_b/dx_k) g_b. Per encoding:

- amplitude: psi = x / ||x|| (padded): dL/dx = (Re g - psi <psi, Re g>) / ||x|| on the values;
- angle: psi_b = prod_k f_k(b_k), f = (cos x_k, sin x_k), and f_k' = (-sin x_k, cos x_k) is f_k
  with its two entries swapped and the first negated: dpsi_b/dx_k = +-psi_{b xor 2^k} (minus
  where bit k of b is 0), so dL/dx_k = sum_b Re g_b (+-) psi_{b xor 2^k}, one pass a qubit;
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


def _angle(x: torch.Tensor, psi: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    # d psi_b / d x_k is psi with qubit k's factor (cos, sin) turned into (-sin, cos): psi at
    # b with bit k flipped, negated where bit k is 0. So each x_k takes one pass over Re g and
    # psi (real for angle), pairing the halves of every stride-2^k block.
    r, p = g.real.contiguous(), psi.real.contiguous()
    rows = r.shape[0]
    out = torch.empty(rows, n, dtype=r.dtype, device=r.device)
    for k in range(n):
        r3, p3 = r.view(rows, -1, 2, 1 << k), p.view(rows, -1, 2, 1 << k)
        out[:, k] = (r3[:, :, 1] * p3[:, :, 0] - r3[:, :, 0] * p3[:, :, 1]).sum(dim=(1, 2))
    return out


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
