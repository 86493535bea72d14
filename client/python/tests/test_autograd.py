"""qdp.torch.encode as an autograd function against the CPU daemon: the state is qdp.encode's,
and its gradient passes torch.autograd.gradcheck (float64, against finite differences) for every
encoding that has one, batched and single; basis refuses a tensor that asks for a gradient."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest
from qdpref import batch

import qdp

torch = pytest.importorskip("torch")
qt = pytest.importorskip("qdp.torch")


@pytest.fixture
def default(daemon: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from qdp import _functions

    monkeypatch.setenv("QDP_TARGET", daemon.target)
    _functions._default.close()
    yield
    _functions._default.close()


CASES = [("angle", 3, 3), ("phase", 3, 3), ("amplitude", 3, 6), ("iqp-z", 3, 3), ("iqp", 3, 6)]


@pytest.mark.parametrize("encoding,n,m", CASES)
def test_gradients_pass_gradcheck(default: None, encoding: str, n: int, m: int) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(4, m, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: qt.encode(t, encoding, n), (x,), eps=1e-6,
                                    atol=1e-7)
    one = torch.rand(m, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: qt.encode(t, encoding, n), (one,), eps=1e-6,
                                    atol=1e-7)


@pytest.mark.parametrize("encoding,n,m", CASES)
def test_the_state_is_the_reference(default: None, encoding: str, n: int, m: int) -> None:
    X = np.random.default_rng(2).uniform(-1, 1, size=(5, m))
    psi = qt.encode(torch.tensor(X, requires_grad=True), encoding, n)
    assert psi.requires_grad and psi.dtype == torch.complex128
    np.testing.assert_allclose(psi.detach().numpy(), batch(encoding, X, n), atol=1e-14)


def test_a_loss_gradient_by_hand(default: None) -> None:
    # angle on 1 qubit: psi = (cos x, sin x); L = |psi_1|^2 = sin^2 x, dL/dx = sin 2x.
    x = torch.tensor([0.3, 1.2], dtype=torch.float64, requires_grad=True)
    psi = qt.encode(x[:, None], "angle", 1)
    (psi[:, 1].abs() ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.sin(2 * x.detach().numpy()), atol=1e-15)


def test_basis_refuses_a_gradient(default: None) -> None:
    with pytest.raises(qdp.NotSupported) as e:
        qt.encode(torch.tensor([1.0, 2.0], requires_grad=True), "basis", 2)
    assert "no gradient" in str(e.value)
    out = qt.encode(torch.tensor([1, 2]), "basis", 2)  # without a gradient: the state
    assert out.shape == (2, 4) and out[1, 2] == 1
