"""Certificates for the TLS tests, made with Debian's ``openssl`` command in a folder of the
test's own: two CAs (the right one and a wrong one), server certificates for 127.0.0.1 and
localhost, client certificates, and expired ones made with ``openssl ca`` and dates in the past.

    certs = qdptls.make(folder)
    certs.ca, certs.server, certs.server_key, certs.client("alice"), ...

Every file is PEM; keys are EC P-256, unencrypted, mode 0600. Nothing here talks to qdpd.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict, Tuple

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"

# `openssl ca` needs a configuration: one CA of the test, its database in its folder, any
# subject, the dates from the command line.
_CA_CNF = """\
[ ca ]
default_ca = test_ca
[ test_ca ]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[ any ]
commonName = supplied
organizationName = optional
"""

_SERVER_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
_CLIENT_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=clientAuth\n")


def _run(*args: str, cwd: str) -> None:
    p = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")


class Certs:
    """The files of one folder; certificates are made on first use by name."""

    def __init__(self, folder: str) -> None:
        self.dir = folder
        os.makedirs(folder, exist_ok=True)
        self._serial = 0x1000
        self._made: Dict[str, Tuple[str, str]] = {}
        self.ca, self.ca_key = self._ca("ca", "qdp test CA")
        self.wrong_ca, self.wrong_ca_key = self._ca("wrong-ca", "qdp test CA")  # same name
        self.server, self.server_key = self.leaf("server", "localhost", server=True)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _key(self, name: str) -> str:
        key = self.path(name + ".key")
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key,
             cwd=self.dir)
        os.chmod(key, 0o600)
        return key

    def _ca(self, name: str, cn: str) -> Tuple[str, str]:
        key = self._key(name)
        cert = self.path(name + ".pem")
        _run("req", "-x509", "-new", "-key", key, "-subj", f"/CN={cn}", "-days", "30",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", cert, cwd=self.dir)
        db = self.path(name + ".db")
        os.makedirs(os.path.join(db, "issued"))
        open(os.path.join(db, "index.txt"), "w").close()
        with open(os.path.join(db, "serial"), "w") as f:
            f.write("2000\n")
        with open(os.path.join(db, "ca.cnf"), "w") as f:
            f.write(_CA_CNF.format(dir=db))
        return cert, key

    def leaf(self, name: str, cn: str, *, server: bool = False, ca: str = "ca",
             expired: bool = False, org: str = "") -> Tuple[str, str]:
        """Certificate and key `name`.pem/.key for subject CN=cn (O=org), signed by the CA
        `ca` ("ca" or "wrong-ca"); `expired`: valid only in 2020. Made once per name."""
        if name in self._made:
            return self._made[name]
        key = self._key(name)
        csr, cert, ext = (self.path(name + s) for s in (".csr", ".pem", ".ext"))
        subj = f"/CN={cn}" + (f"/O={org}" if org else "")
        _run("req", "-new", "-key", key, "-subj", subj, "-out", csr, cwd=self.dir)
        with open(ext, "w") as f:
            f.write(_SERVER_EXT if server else _CLIENT_EXT)
        ca_cert, ca_key = self.path(ca + ".pem"), self.path(ca + ".key")
        if expired:
            cnf = os.path.join(self.path(ca + ".db"), "ca.cnf")
            _run("ca", "-batch", "-config", cnf, "-cert", ca_cert, "-keyfile", ca_key,
                 "-in", csr, "-out", cert, "-notext", "-extfile", ext,
                 "-startdate", "20200101000000Z", "-enddate", "20201231000000Z", cwd=self.dir)
        else:
            self._serial += 1
            _run("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
                 "-set_serial", str(self._serial), "-days", "7", "-sha256", "-extfile", ext,
                 "-out", cert, cwd=self.dir)
        self._made[name] = (cert, key)
        return cert, key

    def client(self, cn: str, **kw) -> Tuple[str, str]:
        """A client certificate of subject CN=cn,O=qdp-test (name "client-<cn>")."""
        tag = "-".join(["client", cn] + [k for k, v in sorted(kw.items()) if v])
        return self.leaf(tag, cn, org="qdp-test", **kw)

    def serial(self, cert: str) -> int:
        """The serial number of a PEM certificate."""
        p = subprocess.run([OPENSSL, "x509", "-noout", "-serial", "-in", cert],
                           capture_output=True, text=True, check=True)
        return int(p.stdout.strip().split("=", 1)[1], 16)


def make(folder: str) -> Certs:
    return Certs(folder)


def served_serial(host: str, port: int, ca: str, cert: str = "", key: str = "") -> int:
    """The serial number of the certificate a TLS server shows a new connection."""
    import ssl
    import socket

    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    if cert:
        ctx.load_cert_chain(cert, key)
    with socket.create_connection((host, port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            der = t.getpeercert(binary_form=True)
    p = subprocess.run([OPENSSL, "x509", "-inform", "DER", "-noout", "-serial"], input=der,
                       capture_output=True, check=True)
    return int(p.stdout.decode().strip().split("=", 1)[1], 16)
