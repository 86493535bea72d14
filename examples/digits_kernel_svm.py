#!/usr/bin/env python3
"""A support vector machine on a quantum kernel: scikit-learn's handwritten digits, each 8x8
image's 64 pixels encoded as a 6-qubit amplitude state, classified by
SVC(kernel=QuantumKernel("amplitude", 6)) and, for comparison, by the classical RBF SVC.

The kernel of two images is the fidelity |<x|y>|^2 of their states, computed by qdpd where the
states are; SVC calls the kernel itself, on the training images to fit and on the test images
against them to predict. Needs scikit-learn (pip install scikit-learn); the digits ship with it.

Usage: python3 examples/digits_kernel_svm.py [--target unix:/run/qdp/qdpd.sock]
"""

import argparse
import os
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

from qdp.sklearn import QuantumKernel

QUBITS = 6  # 2**6 = 64 amplitudes, one per pixel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=None, help="the daemon (default: $QDP_TARGET, else "
                    "the default socket)")
    args = ap.parse_args()
    if args.target:
        os.environ["QDP_TARGET"] = args.target
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    print(f"digits: {len(X_train)} training and {len(X_test)} test images of {X.shape[1]} "
          f"pixels, {QUBITS}-qubit amplitude states")

    kernel = QuantumKernel("amplitude", QUBITS)
    t = time.perf_counter()
    K_train = kernel(X_train)
    K_test = kernel(X_test, X_train)
    took = time.perf_counter() - t
    print(f"kernel matrices {K_train.shape[0]}x{K_train.shape[1]} and "
          f"{K_test.shape[0]}x{K_test.shape[1]}: {took:.3f} s")

    for name, svc in ((f"quantum kernel, {kernel!r}", SVC(kernel=kernel)),
                      ("classical RBF kernel", SVC(kernel="rbf"))):
        t = time.perf_counter()
        svc.fit(X_train, y_train)
        accuracy = float(np.mean(svc.predict(X_test) == y_test))
        print(f"{name}: accuracy {accuracy:.4f}, fit and predict {time.perf_counter() - t:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
