"""qdp.sklearn.QuantumKernel against the CPU daemon: its matrices equal the fidelities of the
reference states (tests/reference, computed here); SVC, KernelRidge and GaussianProcessClassifier
given it predict as they do given those reference matrices; clone, parameters and repr follow
scikit-learn's protocols; bad arguments are refused naming the field; and without scikit-learn
the module's ImportError says how to install it while ``import qdp`` needs none."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType
from typing import Any, Optional

import numpy as np
import pytest
from qdpref import batch

import qdp


@pytest.fixture
def sk() -> ModuleType:
    """qdp.sklearn, where scikit-learn is installed."""
    pytest.importorskip("sklearn", reason="scikit-learn is not installed "
                        "(pip install scikit-learn)")
    return importlib.import_module("qdp.sklearn")


def fidelities(encoding: str, X: np.ndarray, Y: np.ndarray, n: int) -> np.ndarray:
    """|<x_i|y_j>|^2 of the reference states, summed in NumPy."""
    return np.abs(batch(encoding, X, n).conj() @ batch(encoding, Y, n).T) ** 2


def iris() -> Any:
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    return X[order[:100]], y[order[:100]], X[order[100:]], y[order[100:]]


@pytest.mark.parametrize("encoding,n,values", [("amplitude", 6, 40), ("angle", 5, 5)])
def test_the_matrix_is_the_reference_fidelity(sk: ModuleType, client: qdp.Client,
                                              encoding: str, n: int, values: int) -> None:
    rng = np.random.default_rng(20)
    X, Y = rng.uniform(-1, 1, size=(7, values)), rng.uniform(-1, 1, size=(3, values))
    k = sk.QuantumKernel(encoding, n, client=client)
    K = k(X, Y)
    assert K.shape == (7, 3) and K.dtype == np.float64
    np.testing.assert_allclose(K, fidelities(encoding, X, Y, n), rtol=0, atol=1e-14)
    S = k(X)
    np.testing.assert_allclose(S, fidelities(encoding, X, X, n), rtol=0, atol=1e-14)
    np.testing.assert_allclose(k.diag(X), np.diag(fidelities(encoding, X, X, n)), rtol=0,
                               atol=1e-14)
    K64 = sk.QuantumKernel(encoding, n, dtype="complex64", client=client)(X, Y)
    assert K64.dtype == np.float32
    np.testing.assert_allclose(K64, fidelities(encoding, X, Y, n), rtol=0, atol=1e-6)


def test_max_bytes_keeps_no_batch_whole(sk: ModuleType, client: qdp.Client,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With max_bytes the matrices come from Client.kernel_of in tiles (no state encoded for
    them) and diag encodes as many samples as fit at a time: 3 of 32 amplitudes for 1600 B
    (which the matrices take in tiles of one row: its states and their real parts, 1536 B)."""
    rng = np.random.default_rng(24)
    X, Y = rng.uniform(-1, 1, size=(7, 20)), rng.uniform(-1, 1, size=(3, 20))
    encoded = []
    encode = client.encode
    monkeypatch.setattr(client, "encode", lambda data, *a, **kw: encoded.append(len(data)) or
                        encode(data, *a, **kw))
    k = sk.QuantumKernel("amplitude", 5, client=client, max_bytes=1600)
    np.testing.assert_allclose(k(X, Y), fidelities("amplitude", X, Y, 5), rtol=0, atol=1e-14)
    np.testing.assert_allclose(k(X), fidelities("amplitude", X, X, 5), rtol=0, atol=1e-14)
    assert encoded == []
    np.testing.assert_allclose(k.diag(X), 1.0, rtol=0, atol=1e-14)
    assert encoded == [3, 3, 1]
    assert "max_bytes=1600" in repr(k)


def test_a_y_that_is_x_is_sent_once(sk: ModuleType, client: qdp.Client,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """k(X, X), as SVC.fit calls it, is the symmetric matrix of X's inputs alone (each pair once);
    another array of the same values goes as Y."""
    X = np.random.default_rng(23).uniform(-1, 1, size=(5, 4))
    sent = []
    kernel_of = client.kernel_of
    monkeypatch.setattr(client, "kernel_of", lambda X, *a, **kw: sent.append(a[2] is None) or
                        kernel_of(X, *a, **kw))
    k = sk.QuantumKernel("angle", 4, client=client)
    want = fidelities("angle", X, X, 4)
    np.testing.assert_allclose(k(X, X), want, rtol=0, atol=1e-14)
    np.testing.assert_allclose(k(X, X.copy()), want, rtol=0, atol=1e-14)
    assert sent == [True, False]


def test_the_gradient_is_empty_and_only_of_x_with_itself(sk: ModuleType,
                                                        client: qdp.Client) -> None:
    X = np.random.default_rng(21).uniform(-1, 1, size=(4, 3))
    k = sk.QuantumKernel("angle", 3, client=client)
    K, dK = k(X, eval_gradient=True)
    np.testing.assert_allclose(K, fidelities("angle", X, X, 3), rtol=0, atol=1e-14)
    assert dK.shape == (4, 4, 0)
    assert k.theta.shape == (0,) and k.is_stationary() is False
    with pytest.raises(qdp.InvalidArgument) as e:
        k(X, X[:2], eval_gradient=True)
    assert e.value.field == "eval_gradient"


def test_svc_predicts_as_with_the_reference_matrices(sk: ModuleType,
                                                     client: qdp.Client) -> None:
    from sklearn.svm import SVC

    X, y, Xt, _ = iris()
    svc = SVC(kernel=sk.QuantumKernel("angle", 4, client=client)).fit(X, y)
    want = SVC(kernel="precomputed").fit(fidelities("angle", X, X, 4), y)
    Kt = fidelities("angle", Xt, X, 4)
    np.testing.assert_array_equal(svc.predict(Xt), want.predict(Kt))
    np.testing.assert_allclose(svc.decision_function(Xt), want.decision_function(Kt),
                               rtol=0, atol=1e-9)


def test_kernel_ridge_predicts_as_with_the_reference_matrices(sk: ModuleType,
                                                              client: qdp.Client) -> None:
    from sklearn.kernel_ridge import KernelRidge

    X, _, Xt, _ = iris()
    target = X[:, 2] * X[:, 3]  # petal area, from the sepals' and petals' shapes
    kr = KernelRidge(kernel=sk.QuantumKernel("amplitude", 2, client=client), alpha=0.01)
    want = KernelRidge(kernel="precomputed", alpha=0.01)
    want.fit(fidelities("amplitude", X, X, 2), target)
    np.testing.assert_allclose(kr.fit(X, target).predict(Xt),
                               want.predict(fidelities("amplitude", Xt, X, 2)),
                               rtol=1e-9, atol=1e-9)


def test_gaussian_process_classifier_fits_and_predicts(sk: ModuleType,
                                                       client: qdp.Client) -> None:
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import ConstantKernel, Kernel

    class Reference(Kernel):
        """The same fidelity kernel from the reference states."""

        def __init__(self, encoding: str = "angle", qubits: int = 4) -> None:
            self.encoding, self.qubits = encoding, qubits

        def __call__(self, X: Any, Y: Optional[Any] = None, eval_gradient: bool = False) -> Any:
            K = fidelities(self.encoding, X, X if Y is None else Y, self.qubits)
            return (K, np.empty(K.shape + (0,))) if eval_gradient else K

        def diag(self, X: Any) -> np.ndarray:
            return np.diag(self(X))

        def is_stationary(self) -> bool:
            return False

    X, y, Xt, yt = iris()
    # Three classes: one binary process per class, each with a clone of the kernel; the
    # constant is a hyperparameter the optimizer fits, through the product's gradient.
    for ours, ref in ((sk.QuantumKernel("angle", 4, client=client), Reference()),
                      (ConstantKernel(2.0) * sk.QuantumKernel("angle", 4, client=client),
                       ConstantKernel(2.0) * Reference())):
        gpc = GaussianProcessClassifier(kernel=ours, random_state=0).fit(X, y)
        want = GaussianProcessClassifier(kernel=ref, random_state=0).fit(X, y)
        np.testing.assert_allclose(gpc.predict_proba(Xt), want.predict_proba(Xt), rtol=0,
                                   atol=1e-7)
        np.testing.assert_array_equal(gpc.predict(Xt), want.predict(Xt))
        assert (gpc.predict(Xt) == yt).mean() > 0.8


def test_clone_params_and_repr(sk: ModuleType, client: qdp.Client) -> None:
    from sklearn.base import clone
    from sklearn.svm import SVC

    devices = ["cpu:0", "cpu:1"]
    k = sk.QuantumKernel("angle", 4, dtype="complex64", policy="batch", devices=devices,
                         client=client)
    params = k.get_params()
    assert params == {"encoding": "angle", "qubits": 4, "dtype": "complex64", "policy": "batch",
                      "devices": devices, "client": client, "max_bytes": None}
    c = clone(k)
    assert c is not k and c == k and c.get_params() == params
    assert c.client is client  # the connection is shared, not copied
    assert c.devices == devices and c.devices is not devices
    X, y, Xt, _ = iris()
    svc = clone(SVC(kernel=k)).fit(X, y)  # the way a grid search clones an estimator
    assert svc.kernel is not k and svc.kernel.client is client
    np.testing.assert_allclose(svc.kernel(Xt, X), fidelities("angle", Xt, X, 4), atol=1e-6)
    assert k.set_params(qubits=5).qubits == 5 and c.qubits == 4
    assert repr(sk.QuantumKernel("amplitude", 6)) == \
        "QuantumKernel(encoding='amplitude', qubits=6)"
    assert repr(sk.QuantumKernel("iqp", 3, policy="even")) == \
        "QuantumKernel(encoding='iqp', qubits=3, policy='even')"


def test_bad_arguments_are_refused_naming_the_field(sk: ModuleType, client: qdp.Client) -> None:
    from sklearn.svm import SVC

    X = np.random.default_rng(22).uniform(-1, 1, size=(6, 8))
    y = np.arange(6) % 2
    for k, data, field, words in (
            (sk.QuantumKernel("amplitud", 3, client=client), X, "encoding", "'amplitud'"),
            (sk.QuantumKernel("amplitude", 2, client=client), X, "input.cols", "got 8"),
            (sk.QuantumKernel("angle", 3, client=client), X, "input.cols", "got 8"),
            (sk.QuantumKernel("amplitude", 3, client=client), [["a"] * 8] * 6, "X", "str"),
            (sk.QuantumKernel("amplitude", 3, client=client), X[0], "X", "(8,)")):
        calls = [lambda: k(data), lambda: k.diag(data)]
        if np.ndim(data) == 2:  # sklearn itself refuses a 1-D X
            calls.append(lambda: SVC(kernel=k).fit(data, y))
        for call in calls:
            with pytest.raises(qdp.InvalidArgument) as e:
                call()
            assert e.value.field == field and words in str(e.value), e.value
    k = sk.QuantumKernel("amplitude", 3, client=client)
    with pytest.raises(qdp.InvalidArgument) as e:
        k(X, X[None])
    assert e.value.field == "Y" and "(1, 6, 8)" in str(e.value)
    with pytest.raises(qdp.InvalidArgument) as e:
        k.diag(np.vstack([X, np.zeros(8)]))  # a sample with no state has no diagonal either
    assert e.value.field == "input" and "sample 6" in str(e.value)


def test_without_scikit_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    monkeypatch.delitem(sys.modules, "qdp.sklearn", raising=False)
    with pytest.raises(ImportError, match=r"pip install scikit-learn"):
        importlib.import_module("qdp.sklearn")
    said = subprocess.run([sys.executable, "-c", "import sys; sys.modules['sklearn'] = None; "
                           "import qdp; print(qdp.Client.__name__)"],
                          capture_output=True, text=True, timeout=60)
    assert said.returncode == 0 and said.stdout == "Client\n", said.stderr
