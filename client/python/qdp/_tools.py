"""The executables bundled with the package, and the console scripts that run them.

``pip install .`` at the repository's root builds qdpd, qdpctl and libqdp into the package:
``qdp/_bin/qdpd``, ``qdp/_bin/qdpctl`` and ``qdp/_lib/libqdp.so.0``, the executables finding the
library (and the libraries a repaired wheel grafts beside it) through their run path
``$ORIGIN/../_lib``. ``pip install ./client/python`` installs the Python client alone, for a qdpd
that runs as a system service; :func:`binary` then answers None.

:func:`qdpd` and :func:`qdpctl` are the console scripts of the same names: each replaces the
Python process with the bundled executable (``os.execv``), so its arguments, output, signals and
exit status are the executable's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn, Optional

#: The executables a package built with its binaries holds in ``qdp/_bin``.
BINARIES = ("qdpd", "qdpctl")


def binary(name: str) -> Optional[str]:
    """The path of a bundled executable, or None when the package was installed without it.

    Parameters
    ----------
    name : str
        ``"qdpd"`` or ``"qdpctl"``.

    Returns
    -------
    str or None
        The absolute path of ``qdp/_bin/NAME`` in this installed package; None when that file is
        absent, as in a package installed from ``client/python`` alone, where a caller uses a
        qdpd of the system instead. Nothing is started and nothing is searched on ``PATH``.

    Raises
    ------
    ValueError
        `name` is not one of :data:`BINARIES`.
    """
    if name not in BINARIES:
        raise ValueError(f"binary: name is {name!r}; the bundled executables are "
                         f"{', '.join(BINARIES)}")
    path = Path(__file__).resolve().parent / "_bin" / name
    return str(path) if path.is_file() else None


def _exec(name: str) -> NoReturn:
    path = binary(name)
    if path is None:
        sys.exit(f"{name}: this qdp package was installed without its binaries (from "
                 f"client/python alone); install it from the repository's root (pip install .) "
                 f"or run the {name} of a system install")
    os.execv(path, [name, *sys.argv[1:]])


def qdpd() -> NoReturn:
    """The console script ``qdpd``: runs the bundled daemon with this command line's arguments."""
    _exec("qdpd")


def qdpctl() -> NoReturn:
    """The console script ``qdpctl``: runs the bundled CLI with this command line's arguments."""
    _exec("qdpctl")
