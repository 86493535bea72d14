"""TLS to a TCP daemon: which files a Client uses, read once, as libqdp and qdpctl take them.

``tls_ca`` (the CAs the daemon's certificate must chain to) turns TLS on; ``tls_cert`` and
``tls_key`` together are the client's own certificate chain and key, for a daemon with mutual TLS;
``tls_server_name`` is the name the daemon's certificate carries when it is not the target's host.
Each defaults to ``$QDP_TLS_CA``, ``$QDP_TLS_CERT``, ``$QDP_TLS_KEY``, ``$QDP_TLS_SERVER_NAME``;
``""`` means none. A Unix socket target refuses options given as arguments (the kernel vouches for
both ends there) and ignores the environment's, which are for TCP daemons.
"""

from __future__ import annotations

import errno
import os
from typing import NamedTuple, Optional

from .errors import InvalidArgument, NotFound, PermissionDenied

_ENV = {"tls_ca": "QDP_TLS_CA", "tls_cert": "QDP_TLS_CERT", "tls_key": "QDP_TLS_KEY",
        "tls_server_name": "QDP_TLS_SERVER_NAME"}


class Tls(NamedTuple):
    """What a secure channel needs: PEM bytes (cert and key may be None) and the name."""
    ca: bytes
    cert: Optional[bytes]
    key: Optional[bytes]
    server_name: Optional[str]


def _read(field: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(4 << 20 | 1)
    except OSError as e:
        cls = {errno.ENOENT: NotFound, errno.EACCES: PermissionDenied,
               errno.EPERM: PermissionDenied}.get(e.errno or 0, InvalidArgument)
        raise cls(f"{field} {path!r} cannot be read: {e.strerror}", field=field,
                  hint="") from None
    if len(data) > 4 << 20 or b"-----BEGIN " not in data:
        raise InvalidArgument(f"{field} {path!r} holds no PEM ('-----BEGIN ...-----')",
                              field=field)
    return data


def resolve(target: str, **given: Optional[str]) -> Optional[Tls]:
    """The TLS a channel to ``target`` uses, or None for a plain one.

    Raises
    ------
    InvalidArgument
        A TLS option given for a ``unix:`` target; a certificate without its key (or the other
        way round); a certificate or server name without a CA; a file that holds no PEM.
    NotFound, PermissionDenied
        A file that is not there, or that this process may not read.
    """
    vals = {}
    from_env = set()
    for field, env in _ENV.items():
        v = given.get(field)
        if v is None:
            v = os.environ.get(env) or None
            if v:
                from_env.add(field)
        vals[field] = os.fspath(v) if v else None
    if target.startswith(("unix:", "unix-abstract:")):
        for field, v in vals.items():
            if v and field not in from_env:
                raise InvalidArgument(f"{field} is set but the target {target!r} is a Unix "
                                      "socket: TLS is for TCP targets (host:port)", field=field)
        return None
    ca, cert, key, name = (vals[f] for f in _ENV)
    if bool(cert) != bool(key):
        have, lack = ("tls_cert", "tls_key") if cert else ("tls_key", "tls_cert")
        raise InvalidArgument(f"tls_cert and tls_key (QDP_TLS_CERT, QDP_TLS_KEY) go together: "
                              f"{have} is set, {lack} is not", field=lack)
    if not ca:
        if cert or name:
            raise InvalidArgument(f"{'tls_cert' if cert else 'tls_server_name'} is set but "
                                  "tls_ca (QDP_TLS_CA) is not: TLS needs the CA certificates "
                                  "the daemon's certificate chains to", field="tls_ca")
        return None
    return Tls(_read("tls_ca", ca), _read("tls_cert", cert) if cert else None,
               _read("tls_key", key) if key else None, name)
