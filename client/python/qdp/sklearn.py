"""Quantum kernels for scikit-learn: :class:`QuantumKernel`, the fidelity kernel
k(x, y) = |<psi(x)|psi(y)>|^2 of a qdp encoding, computed by qdpd where the states are.

One object serves every scikit-learn estimator that takes a kernel::

    from sklearn.svm import SVC
    from qdp.sklearn import QuantumKernel

    svc = SVC(kernel=QuantumKernel("amplitude", 6)).fit(X_train, y_train)
    svc.predict(X_test)

``SVC`` and ``KernelRidge`` call it on whole matrices (``KernelRidge`` through
``sklearn.metrics.pairwise_kernels``, which calls a Gaussian-process kernel object as it is),
and ``GaussianProcessClassifier`` and ``GaussianProcessRegressor`` through the Gaussian-process
kernel protocol (``k(X, Y=None, eval_gradient=False)``, ``diag``), in sums and products with
sklearn's own kernels too (``ConstantKernel() * QuantumKernel(...)``).

This module needs scikit-learn (``pip install scikit-learn``); ``import qdp`` does not.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

try:
    from sklearn.gaussian_process.kernels import Kernel
except ImportError as e:
    raise ImportError("qdp.sklearn needs scikit-learn: pip install scikit-learn",
                      name=e.name) from e

from ._functions import default_client, kernel_on
from ._values import real_array
from .client import Client
from .errors import InvalidArgument


class QuantumKernel(Kernel):
    """The fidelity kernel k(x, y) = |<psi(x)|psi(y)>|^2 of a qdp encoding, as a scikit-learn
    kernel.

    Each call is one Kernel call from its samples (:func:`qdp.kernel`): the daemon encodes them a
    piece at a time as it pairs them and keeps nothing. The kernel has no hyperparameters, so Gaussian
    processes leave it as it is (and optimize those of sklearn kernels it is combined with).

    Parameters
    ----------
    encoding : str
        "amplitude", "angle", "basis", "iqp", "iqp-z" or "phase" (``help(qdp.Client.encode)``
        gives each one's values per sample and formula).
    qubits : int
        Qubits per state; the samples' features must be as many as the encoding takes on that
        many qubits (at most ``2**qubits`` for amplitude, ``qubits`` for angle and phase).
    dtype : str, optional
        The states' dtype, "complex128" (the default) or "complex64" (float32 matrices).
    policy : str
        Placement policy of the states, as :meth:`qdp.Client.encode` takes it.
    devices : sequence of str, optional
        The daemon's devices the states may use, as :meth:`qdp.Client.encode` takes them.
    client : qdp.Client, optional
        The client that computes the matrices; by default :func:`qdp.default_client` at each
        call. A clone (``sklearn.base.clone``) shares this client rather than copying it.
    max_bytes : int, optional
        Bound the daemon's device memory by this many bytes: the states are never whole but
        encoded a piece at a time within it (:meth:`qdp.Client.kernel_of`), and :meth:`diag`
        encodes as many rows at a time as fit. None: the resident form's tiles, and :meth:`diag`
        encodes every row at once.

    Notes
    -----
    The arguments are kept as given, as scikit-learn asks of estimators' parameters; the daemon
    checks them at the first call, each refusal a :class:`qdp.InvalidArgument` naming the field
    ("encoding", "qubits", "input.cols" for features that do not fit the qubits, ...).

    Every encoding gives states of norm 1, so the diagonal k(x, x) is 1; :meth:`diag` measures
    it all the same (the squared norms of the states the daemon holds), in one pass over the
    states rather than a matrix, which also refuses samples that have no state (an all-zero
    amplitude sample) instead of reporting 1 for them.
    """

    def __init__(self, encoding: str, qubits: int, *, dtype: Optional[str] = None,
                 policy: str = "auto", devices: Optional[Sequence[str]] = None,
                 client: Optional[Client] = None, max_bytes: Optional[int] = None) -> None:
        self.encoding = encoding
        self.qubits = qubits
        self.dtype = dtype
        self.policy = policy
        self.devices = devices
        self.client = client
        self.max_bytes = max_bytes

    def __call__(self, X: Any, Y: Any = None,
                 eval_gradient: bool = False) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """The kernel matrix K[i, j] = k(X[i], Y[j]).

        Parameters
        ----------
        X : array_like
            ``(n_samples_X, n_features)``: one sample per row.
        Y : array_like, optional
            ``(n_samples_Y, n_features)``; by default X itself (the symmetric case, each pair
            computed once; so is a Y that is the very object X).
        eval_gradient : bool
            Also return the gradient with respect to the hyperparameters: there are none, so
            it is empty. Only with Y omitted, as scikit-learn's kernels take it.

        Returns
        -------
        K : numpy.ndarray
            ``(n_samples_X, n_samples_Y)``, float64 (float32 for complex64 states).
        K_gradient : numpy.ndarray
            ``(n_samples_X, n_samples_X, 0)``, with ``eval_gradient=True``.

        Raises
        ------
        InvalidArgument
            X or Y not a 2-D array of numbers (field "X" or "Y"), ``eval_gradient`` with a Y
            ("eval_gradient"), or a refusal of the encode (see the class's notes).
        """
        same = Y is None or Y is X
        if eval_gradient and not same:
            raise InvalidArgument("eval_gradient=True is only for the kernel of X with itself: "
                                  "leave Y out, as scikit-learn's kernels take it",
                                  field="eval_gradient")
        rows = _rows(X, "X")
        K = kernel_on(self._client(), rows, self.encoding, self.qubits,
                      None if same else _rows(Y, "Y"), max_bytes=self.max_bytes,
                      **self._placement())
        if eval_gradient:
            return K, np.empty((K.shape[0], K.shape[0], 0), dtype=K.dtype)
        return K

    def diag(self, X: Any) -> np.ndarray:
        """The diagonal k(X[i], X[i]) without the matrix: the square of each state's norm^2,
        measured where the states are (1 within rounding).

        Parameters
        ----------
        X : array_like
            ``(n_samples, n_features)``.

        Returns
        -------
        numpy.ndarray
            ``(n_samples,)``, of the dtype :meth:`__call__` gives.

        Raises
        ------
        InvalidArgument
            As :meth:`__call__` raises it for X.
        """
        c = self._client()
        rows = _rows(X, "X")
        dt = np.float32 if self.dtype == "complex64" else np.float64
        # With max_bytes, as many states at a time as fit in it (at least one).
        size = (8 if self.dtype == "complex64" else 16) << int(self.qubits)
        step = len(rows) if self.max_bytes is None else max(1, int(self.max_bytes) // size)
        parts = []
        for i in range(0, len(rows), max(step, 1)):
            with c.encode(rows[i:i + step], self.encoding, self.qubits,
                          **self._placement()) as s:
                norm2 = s.expectations("I" * self.qubits)  # <psi|psi> of each sample
            parts.append(np.reshape(norm2, -1))
        return (np.concatenate(parts) ** 2).astype(dt) if parts else np.empty(0, dt)

    def is_stationary(self) -> bool:
        """False: k(x, y) is not a function of x - y alone."""
        return False

    def __repr__(self) -> str:
        params = inspect.signature(type(self).__init__).parameters
        shown = [f"{k}={v!r}" for k, v in self.get_params(deep=False).items()
                 if params[k].default is inspect.Parameter.empty or v != params[k].default]
        return f"{type(self).__name__}({', '.join(shown)})"

    def __sklearn_clone__(self) -> "QuantumKernel":
        """The same arguments, deep-copied but for the client: a connection to the daemon,
        which scikit-learn's default clone would try to deep-copy."""
        params = self.get_params(deep=False)
        client = params.pop("client")
        return type(self)(client=client, **copy.deepcopy(params))

    def _client(self) -> Client:
        return default_client() if self.client is None else self.client

    def _placement(self) -> Dict[str, Any]:
        """The encode's keywords beyond the encoding and qubits."""
        return {"dtype": self.dtype, "policy": self.policy, "devices": self.devices}


def _rows(X: Any, field: str) -> np.ndarray:
    """``X`` as a 2-D array of numbers, one sample per row, as scikit-learn passes samples.

    Raises
    ------
    InvalidArgument
        Values that are not numbers, or not 2-D (``field``).
    """
    arr = real_array(X, field=field, dtype_field=field)
    if arr.ndim != 2:
        raise InvalidArgument(f"{field} has shape {arr.shape}: a kernel takes samples as rows "
                              f"of a 2-D array (n_samples, n_features); X.reshape(1, -1) for "
                              "one sample", field=field)
    return arr
