"""The abuse suite: what a user who can only reach qdpd's socket tries, run as that user.

Every case of the trust-boundary report, each against a real qdpd running as root (as a node
service would, the worst case): the test makes two users of its own (users made here, removed at
the end) in the socket's group, runs their clients with `setpriv` as those uids, and asserts the
refusal, the daemon's untouched files and states, and that the daemon keeps serving with nothing
held and no descriptor leaked. Needs root (to make users and start the daemon as root); skips
(exit 77) otherwise.

  test_abuse.py QDPD QDPCTL DESC LIBQDP
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np

import qdpc
import qdpref
import qdptls

SC = grpc.StatusCode
GROUP = "qdp-abuse-clients"
EVE, MAL = "qdp-abuse-eve", "qdp-abuse-mal"
TOKEN = "abuse-token-0123456789abcdef"
MAX_CLIENT_STATES, MAX_STATES = 5, 12
MAX_CLIENT_REGIONS = 3
IDLE_S = 2
CLIENT_UPLOAD = 64 << 20

QDPD, QDPCTL, DESC, LIBQDP = sys.argv[1:5]
del sys.argv[1:5]
# The daemon's devices: the CPU backend by default; QDP_ABUSE_DEVICES=auto runs it on the GPUs
# (registered regions are then page-locked, and a shrunk one is caught without a page fault).
DEVICES = os.environ.get("QDP_ABUSE_DEVICES", "cpu:2")


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check)


def make_users():
    for u in (EVE, MAL):
        sh("userdel", u, check=False)
    sh("groupdel", GROUP, check=False)
    sh("groupadd", GROUP)
    for u in (EVE, MAL):
        sh("useradd", "--no-create-home", "--gid", GROUP, "--shell", "/usr/sbin/nologin", u)


def remove_users():
    for u in (EVE, MAL):
        sh("userdel", u, check=False)
    sh("groupdel", GROUP, check=False)


class Abuse(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="qdp-abuse.")
        os.chmod(cls.dir, 0o711)  # other users reach the socket and the tools, list nothing
        d = cls.dir
        cls.uid = {u: int(sh("id", "-u", u).stdout) for u in (EVE, MAL)}
        # What the other users run: copies they can read whatever the checkout's permissions.
        cls.tools = os.path.join(d, "tools")
        os.mkdir(cls.tools, 0o755)
        here = os.path.dirname(os.path.abspath(qdpc.__file__))
        shutil.copy(os.path.join(here, "qdpc.py"), cls.tools)
        shutil.copy(qdpref.__file__, cls.tools)
        shutil.copy(DESC, os.path.join(cls.tools, "qdp.desc"))
        shutil.copy(QDPCTL, os.path.join(cls.tools, "qdpctl"))
        libdir = os.path.dirname(LIBQDP)
        for f in os.listdir(libdir):
            if f.startswith("libqdp.so") and not os.path.isdir(os.path.join(libdir, f)):
                shutil.copy(os.path.join(libdir, f), cls.tools, follow_symlinks=True)
        # Runtime libraries that this machine carries rather than installs (the GPU machine's
        # .gpu/lib), which the tools load as they do for root here.
        for extra in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
            if os.path.isdir(extra) and os.path.abspath(extra) != os.path.abspath(libdir):
                for f in os.listdir(extra):
                    src = os.path.join(extra, f)
                    if ".so" in f and os.path.isfile(src) and \
                            not os.path.exists(os.path.join(cls.tools, f)):
                        shutil.copy(src, cls.tools, follow_symlinks=True)
        for f in os.listdir(cls.tools):
            os.chmod(os.path.join(cls.tools, f), 0o755)
        # The confinement folders a TCP caller is kept in, each with a neighbour outside it.
        for sub in ("in", "in/inside", "outside", "out", "out/inside", "elsewhere"):
            os.mkdir(os.path.join(d, sub), 0o755)
        np.save(os.path.join(d, "in/inside/x.npy"), np.array([3.0, 4.0]))
        np.save(os.path.join(d, "outside/x.npy"), np.array([1.0, 0.0]))
        cls.tokens = os.path.join(d, "tokens")
        with open(cls.tokens, "w") as f:
            f.write(f"# principal token\ntcpuser {TOKEN}\n")
        os.chmod(cls.tokens, 0o600)
        # TCP speaks mutual TLS: each user's client certificate and key, the key readable by
        # that user alone; a wrong CA's, an expired one; the token user's own certificate.
        cls.certs = qdptls.make(os.path.join(d, "tls"))
        os.chmod(cls.certs.dir, 0o755)
        cls.cert = {u: cls.certs.client(u) for u in (EVE, MAL)}
        cls.cert["tcpuser"] = cls.certs.client("tcpuser-machine")
        cls.cert["wrong-ca"] = cls.certs.client(MAL, ca="wrong-ca")
        cls.cert["expired"] = cls.certs.client(MAL, expired=True)
        for name, (pem, key) in cls.cert.items():
            os.chmod(pem, 0o644)
            if name in (EVE, MAL):
                os.chown(key, cls.uid[name], -1)
            elif name != "tcpuser":
                os.chown(key, cls.uid[MAL], -1)  # mal's own bad certificates
        for f in (cls.certs.ca, cls.certs.wrong_ca, cls.certs.server):
            os.chmod(f, 0o644)
        cls.sock = os.path.join(d, "qdpd.sock")
        cls.log = os.path.join(d, "qdpd.log")
        cls.logf = open(cls.log, "w")
        cls.daemon = subprocess.Popen(
            [QDPD, "--socket", cls.sock, "--socket-group", GROUP, "--devices", DEVICES,
             "--max-client-states", str(MAX_CLIENT_STATES), "--max-states", str(MAX_STATES),
             "--max-client-regions", str(MAX_CLIENT_REGIONS), "--expire-interval", "1",
             "--max-upload-bytes", "1Gi", "--upload-budget", "1Gi",
             "--client-upload-budget", str(CLIENT_UPLOAD),
             "--upload-idle-timeout", str(IDLE_S), "--tcp", "127.0.0.1:0",
             "--tcp-tokens-file", cls.tokens, "--tcp-node-paths",
             "--tcp-tls-cert", cls.certs.server, "--tcp-tls-key", cls.certs.server_key,
             "--tcp-tls-client-ca", cls.certs.ca,
             "--input-dir", os.path.join(d, "in"), "--export-dir", os.path.join(d, "out")],
            stderr=cls.logf, env={k: v for k, v in os.environ.items()
                                             if not k.startswith("QDP_")})
        for _ in range(300):
            txt = read(cls.log)
            if "listening on 127.0.0.1:" in txt and os.path.exists(cls.sock):
                break
            if cls.daemon.poll() is not None:
                raise RuntimeError("qdpd did not start:\n" + txt)
            time.sleep(0.1)
        cls.port = int(txt.split("listening on 127.0.0.1:")[1].split()[0])
        cls.target = "unix:" + cls.sock
        os.environ["QDP_TARGET"] = cls.target
        cls.root = qdpc.Client(cls.target, DESC)
        cls.pb = cls.root.pb
        cls.root.status()  # root's channel connects now, so it counts in the baseline
        time.sleep(0.2)
        cls.fds_at_start = cls.daemon_fds()

    @classmethod
    def tearDownClass(cls):
        cls.root.close()
        cls.daemon.send_signal(signal.SIGTERM)
        try:
            rc = cls.daemon.wait(60)
        except subprocess.TimeoutExpired:
            cls.daemon.kill()
            rc = "killed"
        cls.logf.close()
        if rc != 0:
            print(f"qdpd exited with {rc}; its log:\n" + read(cls.log), file=sys.stderr)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def daemon_fds(cls):
        fds = {}
        for f in os.listdir(f"/proc/{cls.daemon.pid}/fd"):
            try:
                fds[f] = os.readlink(f"/proc/{cls.daemon.pid}/fd/{f}")
            except OSError:
                pass
        return fds

    # ---- running as another user ----

    def as_user(self, user, code, timeout=120):
        """Runs Python `code` as user (its uid, the socket's group, nothing else) with qdpc and
        qdpref importable as the tools copies; returns what it printed as JSON."""
        prog = (
            "import json, os, sys, grpc, numpy as np\n"
            "import qdpc, qdpref\n"
            f"c = qdpc.Client({self.target!r}, {os.path.join(self.tools, 'qdp.desc')!r})\n"
            "out = {}\n"
            "def rpc(name, f):\n"
            "    try:\n"
            "        r = f()\n"
            "        out[name] = ['OK', '']\n"
            "        return r\n"
            "    except grpc.RpcError as e:\n"
            "        out[name] = [e.code().name, e.details()]\n"
            "    except OSError as e:\n"
            "        out[name] = ['LOCAL:' + type(e).__name__, str(e)]\n"
            "    except qdpc.HandoffError as e:\n"
            "        out[name] = ['HANDOFF:' + e.status, e.message]\n"
            + code +
            "\nprint(json.dumps(out))\n")
        p = subprocess.run(
            ["setpriv", "--reuid", user, "--regid", GROUP, "--init-groups", sys.executable,
             "-c", prog],
            capture_output=True, text=True, timeout=timeout, cwd="/",
            env={"PYTHONPATH": self.tools, "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def ctl_as(self, user, *args):
        return subprocess.run(
            ["setpriv", "--reuid", user, "--regid", GROUP, "--init-groups",
             os.path.join(self.tools, "qdpctl"), "--target", self.target, *args],
            capture_output=True, text=True, timeout=120, cwd="/",
            env={"LD_LIBRARY_PATH": self.tools, "PATH": "/usr/bin:/bin"})

    def assert_serving_and_empty(self):
        st = self.root.status()
        self.assertEqual((st.states, st.used_bytes, st.regions), (0, 0, 0))
        x = self.root.encode("angle", 2, np.array([0.3, 0.4]))
        self.root.release(x)

    def secret_file(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, 0o600)
        return path

    # ---- 1. reading what the caller could not ----

    def test_1_no_byte_of_a_root_only_file_shm_or_process_memory(self):
        secret = np.random.default_rng(1).bytes(76)
        path = self.secret_file("secret.bin", secret)
        npy = os.path.join(self.dir, "secret.npy")
        np.save(npy, np.frombuffer(secret[:72], dtype=np.float64))
        os.chmod(npy, 0o600)
        shm = f"/qdp-abuse-secret-{os.getpid()}"
        with open("/dev/shm" + shm, "wb") as f:
            f.write(secret + bytes(4096 - len(secret)))
        os.chmod("/dev/shm" + shm, 0o600)
        # A process of root's that holds the file open: its pid and fd are no secret.
        holder = subprocess.Popen([sys.executable, "-c",
                                   f"import os,time; fd=os.open({path!r}, os.O_RDONLY); "
                                   "print(fd, flush=True); time.sleep(120)"],
                                  stdout=subprocess.PIPE, text=True)
        hfd = int(holder.stdout.readline())
        # Root hands the file over; the ticket is what eve would love to have.
        stolen = self.root.hand_file(npy)
        try:
            out = self.as_user(EVE, f"""
path, npy, shm, pid, fd, stolen = {path!r}, {npy!r}, {shm!r}, {holder.pid}, {hfd}, {stolen!r}
for dt, enc in (("float64", "basis"), ("float64", "amplitude")):
    r = c.request(enc, 3, None, path=npy, hand_over=False)
    rpc(f"path {{enc}}", lambda: c.call("Encode", r))
    r = c.request(enc, 3, None, path=npy, hand_over=False)
    r.input.fd_ticket = stolen
    rpc(f"stolen ticket {{enc}}", lambda: c.call("Encode", r))
rpc("open the file here", lambda: c.hand_file(npy))
m = c.pb.SharedMemory(pid=pid, fd=fd, length=72)
r = c.request("basis", 3, None, input_dtype="float64", shm=m, hand_over=False)
rpc("shm by pid+fd", lambda: c.call("Encode", r))
rpc("open pid+fd here", lambda: c.hand_file(f"/proc/{{pid}}/fd/{{fd}}"))
m = c.pb.SharedMemory(name=shm, length=72)
r = c.request("basis", 3, None, input_dtype="float64", shm=m, hand_over=False)
rpc("shm by name", lambda: c.call("Encode", r))
rpc("region by name", lambda: c.call("RegisterRegion", c.pb.RegisterRegionRequest(name=shm)))
rpc("region by pid+fd",
    lambda: c.call("RegisterRegion", c.pb.RegisterRegionRequest(pid=pid, fd=fd)))
""")
            ctl = self.ctl_as(EVE, "encode", "--encoding", "basis", "--qubits", "3",
                              "--server-file", npy)
        finally:
            holder.kill()
            holder.wait()
            os.unlink("/dev/shm" + shm)
        for what, (code, details) in out.items():
            with self.subTest(what):
                if what.startswith("open"):
                    self.assertEqual(code, "LOCAL:PermissionError", details)
                elif what.startswith("stolen"):
                    self.assertEqual(code, "NOT_FOUND", details)
                else:
                    self.assertEqual(code, "PERMISSION_DENIED", details)
        # qdpctl cannot open it for eve either, and says why without asking the daemon: a
        # permission failure (8), as the daemon's would be.
        self.assertEqual(ctl.returncode, 8, ctl.stderr)
        self.assertIn("Permission denied", ctl.stderr)
        # No message carries the secret's bytes, as values or otherwise.
        text = json.dumps(out) + ctl.stderr + ctl.stdout + read(self.log)
        for v in np.frombuffer(secret[:72], dtype=np.float64):
            for fmt in ("%.17g", "%.6g", "%g"):
                self.assertNotIn(fmt % v, text)
        # Eve's tries did not consume root's ticket: root can name it (the file, outside this
        # daemon's input_dir, is then refused for root too, which a folder is for).
        with self.assertRaises(grpc.RpcError) as cm:
            self.root.call("Encode", self.pb.EncodeRequest(
                encoding=1, qubits=4, input=self.pb.Input(path=npy, fd_ticket=stolen)))
        self.assertEqual(cm.exception.code(), SC.PERMISSION_DENIED)
        self.assertIn("outside", cm.exception.details())
        for what in ("path basis", "shm by pid+fd", "shm by name", "region by name"):
            self.assertIn("open it yourself", out[what][1])
        self.assert_serving_and_empty()

    # ---- 2. writing where the caller could not ----

    def test_2_no_file_created_or_changed_that_the_caller_could_not(self):
        target = self.secret_file("root-only.npy", b"root's own, mode 0600")
        before = os.stat(target)
        lock = self.sock + ".lock"
        lock_before = read(lock)
        x = self.root.encode("angle", 3, np.array([0.1, 0.2, 0.3]))
        ref = f"{x.handle}:{x.token}"
        try:
            out = self.as_user(EVE, f"""
st = c.pb.StateInfo(handle={x.handle!r}, token={x.token!r})
er = c.pb.ExportRequest(path={target!r}, overwrite=True)
er.state.CopyFrom(c.ref(st))
rpc("export by path", lambda: c.call("Export", er))
rpc("export over it here", lambda: c.export(st, {target!r}, overwrite=True))
rpc("export into the daemon's folder", lambda: c.export(st, {lock!r}, overwrite=True))
rpc("new file in a root-only folder", lambda: c.export(st, "/root/qdp-abuse.npy"))
""")
            ctl = self.ctl_as(EVE, "export", ref, target, "--force")
            # Root itself cannot have the daemon write into the daemon's own lock file.
            fd = os.open(lock, os.O_RDWR)
            try:
                er = self.pb.ExportRequest(path=lock, overwrite=True, fd_ticket=self.root.hand(
                    fd, qdpc.WRITE))
                er.state.CopyFrom(self.root.ref(x))
                with self.assertRaises(grpc.RpcError) as cm:
                    self.root.call("Export", er)
                self.assertEqual(cm.exception.code(), SC.PERMISSION_DENIED)
                self.assertIn("daemon's own files", cm.exception.details())
            finally:
                os.close(fd)
        finally:
            self.root.release(x)
        self.assertEqual(out["export by path"][0], "PERMISSION_DENIED", out)
        for what in ("export over it here", "export into the daemon's folder",
                     "new file in a root-only folder"):
            self.assertEqual(out[what][0], "LOCAL:PermissionError", (what, out[what]))
        self.assertEqual(ctl.returncode, 8, ctl.stderr)  # permission, found by qdpctl
        after = os.stat(target)
        self.assertEqual((after.st_mode, after.st_size, after.st_mtime_ns),
                         (before.st_mode, before.st_size, before.st_mtime_ns))
        self.assertEqual(read(target, "rb"), b"root's own, mode 0600")
        self.assertFalse(os.path.exists("/root/qdp-abuse.npy"))
        self.assertEqual(read(lock), lock_before)
        # The lock still holds: a second daemon on the socket is refused.
        p = subprocess.run([QDPD, "--socket", self.sock, "--devices", "cpu:1"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("already serves", p.stderr)
        self.assert_serving_and_empty()

    # ---- 3. racing the confinement folders ----

    def swap(self, link, a, b, stop):
        tmp = link + ".tmp"
        i = 0
        while not stop.is_set():
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            os.symlink(a if i % 2 else b, tmp)
            os.replace(tmp, link)
            i += 1

    def tcp(self):
        pem, key = self.cert["tcpuser"]
        creds = grpc.ssl_channel_credentials(read(self.certs.ca, "rb"), read(key, "rb"),
                                             read(pem, "rb"))
        ch = grpc.secure_channel(f"127.0.0.1:{self.port}", creds)
        md = (("authorization", "Bearer " + TOKEN),)
        enc = ch.unary_unary("/qdp.Qdp/Encode", self.pb.EncodeRequest.SerializeToString,
                             self.pb.EncodeReply.FromString)
        exp = ch.unary_unary("/qdp.Qdp/Export", self.pb.ExportRequest.SerializeToString,
                             self.pb.ExportReply.FromString)
        rel = ch.unary_unary("/qdp.Qdp/Release", self.pb.StateRef.SerializeToString,
                             self.pb.ReleaseReply.FromString)
        return ch, md, enc, exp, rel

    def test_3_folders_hold_while_a_link_is_swapped_in_a_loop(self):
        d = self.dir
        ch, md, enc, exp, rel = self.tcp()
        stop = threading.Event()
        link = os.path.join(d, "in/d")
        t = threading.Thread(target=self.swap, args=(link, "inside", "../outside", stop))
        t.start()
        inside = outside = refused = 0
        try:
            for _ in range(400):
                req = self.pb.EncodeRequest(encoding=1, qubits=1, input=self.pb.Input(
                    path=os.path.join(d, "in/d/x.npy")))
                try:
                    st = enc(req, metadata=md, timeout=30).state
                except grpc.RpcError as e:
                    self.assertIn(e.code(), (SC.PERMISSION_DENIED, SC.NOT_FOUND), e.details())
                    refused += 1
                    continue
                self.assertEqual(st.owner, "tcp:tcpuser")
                f = self.pb.FetchRequest()
                f.state.handle, f.state.token = st.handle, st.token
                got = self.root.fetch(st)
                if abs(got[0].real - 0.6) < 1e-12:
                    inside += 1
                else:
                    outside += 1
                rel(self.pb.StateRef(handle=st.handle, token=st.token), metadata=md, timeout=30)
        finally:
            stop.set()
            t.join()
        self.assertEqual(outside, 0, f"{outside} of 400 reads came from outside input_dir")
        self.assertGreater(inside + refused, 0)
        # A TCP caller names nothing else of the node: no path outside the folder, no shared
        # memory, no region, whatever it says.
        for what, req in (
                ("outside input_dir", self.pb.EncodeRequest(encoding=1, qubits=1, input=self.pb.Input(
                    path=os.path.join(d, "outside/x.npy")))),
                ("shared memory", self.pb.EncodeRequest(encoding=1, qubits=1, input=self.pb.Input(
                    dtype=2, shm=self.pb.SharedMemory(name="/x", length=16))))):
            with self.assertRaises(grpc.RpcError) as cm:
                enc(req, metadata=md, timeout=30)
            self.assertEqual(cm.exception.code(), SC.PERMISSION_DENIED, (what, cm.exception.details()))
        # Exports: the same race on export_dir; nothing may land in the folder beside it.
        x = self.root.encode("angle", 2, np.array([0.1, 0.2]))
        stop.clear()
        link = os.path.join(d, "out/d")
        t = threading.Thread(target=self.swap, args=(link, "inside", "../elsewhere", stop))
        t.start()
        try:
            for i in range(400):
                er = self.pb.ExportRequest(path=os.path.join(d, f"out/d/s{i}.npy"))
                er.state.CopyFrom(self.root.ref(x))
                try:
                    exp(er, metadata=md, timeout=30)
                except grpc.RpcError as e:
                    self.assertIn(e.code(), (SC.PERMISSION_DENIED, SC.NOT_FOUND), e.details())
        finally:
            stop.set()
            t.join()
            self.root.release(x)
            ch.close()
        self.assertEqual(os.listdir(os.path.join(d, "elsewhere")), [],
                         "an export landed outside export_dir")
        self.assertGreater(len(os.listdir(os.path.join(d, "out/inside"))), 0)
        self.assert_serving_and_empty()

    # ---- 4. identity is the kernel's ----

    def test_4_identity_comes_from_the_kernel_not_the_client(self):
        mine = self.root.encode("angle", 2, np.array([0.5, 0.5]))
        eve = self.uid[EVE]
        out = self.as_user(EVE, f"""
c2 = qdpc.Client({self.target!r}, {os.path.join(self.tools, 'qdp.desc')!r}, name="root")
st = rpc("encode as 'root'", lambda: c2.encode("angle", 2, np.array([0.1, 0.2])))
out["owner"] = st.owner if st else ""
names = []
for i in range(50):
    n = qdpc.Client({self.target!r}, proto=c.pb, name=f"invented-{{i}}")
    s = rpc("invented", lambda: n.encode("angle", 2, np.array([0.1, 0.2])))
    names.append(out["invented"][0])
    n.close()
out["invented results"] = names
out["listed"] = [s.handle for s in c.call("List", c.pb.ListRequest()).states]
rpc("list all", lambda: c.call("List", c.pb.ListRequest(all=True)))
rpc("release root's by handle", lambda: c.call("Release", c.pb.StateRef(handle={mine.handle!r})))
rpc("describe root's without its token",
    lambda: c.call("Describe", c.pb.StateRef(handle={mine.handle!r})))
rpc("a kernel of root's without its token",
    lambda: c.call("Kernel", c.pb.KernelRequest(a=c.pb.StateRef(handle={mine.handle!r}))))
rpc("a measurement of root's without its token",
    lambda: c.call("Measure", c.pb.MeasureRequest(measurement=1,
                                                  state=c.pb.StateRef(handle={mine.handle!r}))))
""")
        self.assertEqual(out["encode as 'root'"][0], "OK")
        self.assertEqual(out["owner"], f"uid:{eve}")
        results = out["invented results"]
        self.assertEqual(results.count("OK"), MAX_CLIENT_STATES - 1, results)
        self.assertTrue(all(r in ("OK", "RESOURCE_EXHAUSTED") for r in results), results)
        self.assertEqual(len(out["listed"]), MAX_CLIENT_STATES)
        self.assertNotIn(mine.handle, out["listed"])
        self.assertEqual(out["list all"][0], "PERMISSION_DENIED")
        self.assertEqual(out["release root's by handle"][0], "NOT_FOUND")
        self.assertEqual(out["describe root's without its token"][0], "NOT_FOUND")
        self.assertEqual(out["a kernel of root's without its token"][0], "NOT_FOUND")
        self.assertEqual(out["a measurement of root's without its token"][0], "NOT_FOUND")
        # Eve's 50 names did not fill the store: another user and root still encode.
        mal = self.as_user(MAL, """
rpc("encode", lambda: c.encode("angle", 2, np.array([0.3, 0.4])))
""")
        self.assertEqual(mal["encode"][0], "OK")
        self.assertEqual(self.root.call("Describe", self.root.ref(mine)).handle, mine.handle)
        every = self.root.call("List", self.pb.ListRequest(all=True)).states
        self.assertEqual(sorted({s.owner for s in every}),
                         sorted({f"uid:{eve}", f"uid:{self.uid[MAL]}", "uid:0"}))
        # Each frees its own by identity alone, with the CLI; nothing of the others'.
        for user in (EVE, MAL):
            p = self.ctl_as(user, "rm", "--mine", "--all")
            self.assertEqual(p.returncode, 0, p.stderr)
        p = self.ctl_as(EVE, "ls", "--all")
        self.assertEqual(p.returncode, 8, p.stderr)
        self.assertIn("PERMISSION_DENIED", p.stderr)
        self.assertEqual([s.handle for s in self.root.call(
            "List", self.pb.ListRequest(all=True)).states], [mine.handle])
        self.root.release(mine)
        self.assert_serving_and_empty()

    # ---- 5. uploads cannot starve the others ----

    def test_5_idle_or_greedy_uploads_do_not_starve_anyone(self):
        out = {}

        def eve_idles():
            out.update(self.as_user(EVE, """
import threading
def idle():
    req = c.request("amplitude", 26, None, input_dtype="float64", rows=1, cols=1 << 26)
    first = c.pb.UploadChunk(); first.request.CopyFrom(req)
    def msgs():
        yield first
        yield c.pb.UploadChunk(data=b"\\0" * 8)
        threading.Event().wait(60)
    rpc("idle upload", lambda: c._EncodeUpload(msgs(), timeout=60))
    out.setdefault("idle codes", []).append(out["idle upload"])
ts = [threading.Thread(target=idle) for _ in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
"""))
        t = threading.Thread(target=eve_idles)
        t.start()
        time.sleep(0.5 + IDLE_S / 4)
        # Two uploads declaring 512 MiB each hold 1 MiB each: root's goes through at once.
        t0 = time.monotonic()
        data = np.arange(1, 1 + (1 << 20), dtype=np.float64)
        req = self.root.request("amplitude", 20, None, input_dtype="float64", rows=1,
                                cols=1 << 20)
        st = self.root.upload(req, data.tobytes())
        self.assertLess(time.monotonic() - t0, IDLE_S, "root's upload waited for eve's")
        self.root.release(st)
        t.join()
        for code, details in out["idle codes"]:
            self.assertEqual(code, "CANCELLED", details)
            self.assertIn("sent nothing", details)
        # One identity's uploads in flight are capped: eve cannot hold more than her share.
        big = self.as_user(EVE, f"""
data = bytes({CLIENT_UPLOAD} + (1 << 20))
req = c.request("amplitude", 24, None, input_dtype="float64")
rpc("greedy upload", lambda: c.upload(req, data, chunk=4 << 20))
""")
        self.assertEqual(big["greedy upload"][0], "RESOURCE_EXHAUSTED", big)
        self.assertIn("client_upload_budget", big["greedy upload"][1])
        self.assert_serving_and_empty()

    # ---- 6. orphans ----

    def test_6_nothing_is_committed_for_a_caller_that_is_gone(self):
        # An undeclared upload whose client is killed after 48 MiB (its share is 64 MiB). It
        # goes first: the job below keeps the daemon's CPUs busy for seconds after its caller
        # left, and an upload starved meanwhile would end on upload_idle_timeout instead.
        killed = subprocess.Popen(
            ["setpriv", "--reuid", EVE, "--regid", GROUP, "--init-groups", sys.executable, "-c",
             f"""
import os, signal, qdpc, numpy as np
c = qdpc.Client({self.target!r}, {os.path.join(self.tools, 'qdp.desc')!r})
req = c.request("amplitude", 24, None, input_dtype="float64")
def msgs():
    first = c.pb.UploadChunk(); first.request.CopyFrom(req); yield first
    for i in range(12):
        yield c.pb.UploadChunk(data=bytes(4 << 20))
    os.kill(os.getpid(), signal.SIGKILL)
    yield c.pb.UploadChunk(data=b"")
c._EncodeUpload(msgs(), timeout=60)
"""], env={"PYTHONPATH": self.tools, "PATH": "/usr/bin:/bin"}, cwd="/")
        killed.wait(120)
        self.assertEqual(killed.returncode, -signal.SIGKILL)
        # A 1 s deadline on a job of several seconds (an iqp-z state of 2^27 complex128
        # amplitudes on the CPU; a GPU does it in milliseconds, so there the case is skipped).
        on_cpu = DEVICES.startswith("cpu")
        if on_cpu:
            out = self.as_user(EVE, """
req = c.request("iqp-z", 27, np.full(27, 0.1))
rpc("short deadline", lambda: c.call("Encode", req, timeout=1))
""")
            self.assertEqual(out["short deadline"][0], "DEADLINE_EXCEEDED")
        # The deadline's job ends in its own time; then nothing of either is held.
        for _ in range(300):
            st = self.root.status()
            if st.states == 0 and st.used_bytes == 0:
                break
            time.sleep(0.1)
        every = self.root.call("List", self.pb.ListRequest(all=True)).states
        self.assertEqual(list(every), [])
        # The upload's verdict: its client died, so CANCELLED (never a bad argument, never a
        # state built from 48 MiB of a larger input).
        eve = f"uid:{self.uid[EVE]} pid {killed.pid}"
        for _ in range(50):
            log = read(self.log)
            upload_lines = [ln for ln in log.splitlines() if "EncodeUpload from " + eve in ln]
            if upload_lines:
                break
            time.sleep(0.1)
        self.assertTrue(upload_lines, log[-2000:])
        self.assertIn("CANCELLED", upload_lines[-1])
        # The deadline's job ran to its end and kept nothing (its reservation is back too).
        for _ in range(300 if on_cpu else 0):
            log = read(self.log)
            kept = [ln for ln in log.splitlines() if f"Encode from uid:{self.uid[EVE]}" in ln and
                    "before the state was ready; nothing was kept" in ln]
            if kept:
                break
            time.sleep(0.1)
        if on_cpu:
            self.assertTrue(kept, log[-2000:])
            self.assertTrue("DEADLINE_EXCEEDED" in kept[0] or "CANCELLED" in kept[0], kept[0])
        self.assertEqual(self.root.status().used_bytes, 0)
        self.assert_serving_and_empty()

    # ---- 7. a shrunk region ----

    def test_7_a_region_that_shrinks_never_encodes_zeros(self):
        out = self.as_user(EVE, """
import threading
x = np.arange(1, 1 + (1 << 16), dtype=np.float64)
name = "/qdp-abuse-eve-%d" % os.getpid()
with open("/dev/shm" + name, "wb") as f:
    f.write(x.tobytes())
reg = c.pb.RegisterRegionRequest(name=name)
reg.fd_ticket = c.hand_file("/dev/shm" + name)
info = c.call("RegisterRegion", reg)
def req(enc, qubits, length):
    m = c.pb.SharedMemory(region=info.handle, region_token=info.token, offset=0, length=length)
    return c.request(enc, qubits, None, input_dtype="float64", shm=m)
os.truncate("/dev/shm" + name, 0)
rpc("amplitude after truncate", lambda: c.call("Encode", req("amplitude", 16, x.nbytes)))
rpc("angle after", lambda: c.call("Encode", req("angle", 2, 16)))
c.call("UnregisterRegion", c.pb.RegionRef(handle=info.handle, token=info.token))
# Several jobs on one region while it is cut: each is right or DATA_LOSS, never zeros with OK.
big = np.random.default_rng(3).standard_normal(1 << 22)
with open("/dev/shm" + name, "wb") as f:
    f.write(big.tobytes())
reg.fd_ticket = c.hand_file("/dev/shm" + name)
info = c.call("RegisterRegion", reg)
want = qdpref.amplitude(big, 22)
codes = []
def job():
    for _ in range(3):
        try:
            st = c.call("Encode", req("amplitude", 22, big.nbytes)).state
            got = c.fetch(st)
            c.release(st)
            qdpref.assert_close(got, want, "complex128")
            codes.append("OK")
        except AssertionError:
            codes.append("WRONG")
        except grpc.RpcError as e:
            codes.append(e.code().name)
ts = [threading.Thread(target=job) for _ in range(3)]
[t.start() for t in ts]
import time; time.sleep(0.05)
os.truncate("/dev/shm" + name, 4096)
[t.join() for t in ts]
out["concurrent"] = codes
rpc("after the cut", lambda: c.call("Encode", req("amplitude", 22, big.nbytes)))
c.call("UnregisterRegion", c.pb.RegionRef(handle=info.handle, token=info.token))
os.unlink("/dev/shm" + name)
""", timeout=300)
        self.assertEqual(out["amplitude after truncate"][0], "DATA_LOSS", out)
        self.assertEqual(out["angle after"][0], "DATA_LOSS", out)
        self.assertIn("register it again", out["angle after"][1])
        self.assertNotIn("WRONG", out["concurrent"], out["concurrent"])
        self.assertTrue(set(out["concurrent"]) <= {"OK", "DATA_LOSS"}, out["concurrent"])
        self.assertEqual(out["after the cut"][0], "DATA_LOSS", out)
        self.assert_serving_and_empty()

    # ---- 8. writing into regions: FetchInto ----

    def test_8_fetch_into_writes_only_where_the_caller_could(self):
        fd = os.memfd_create("qdp-abuse-root-out")
        os.ftruncate(fd, 4096)
        mine = self.root.register_region(f"/proc/{os.getpid()}/fd/{fd}", writable=True)
        secret = self.secret_file("eve-reads-only", b"\0" * 4096)
        os.chmod(secret, 0o644)
        try:
            out = self.as_user(EVE, f"""
st = c.encode("angle", 2, np.array([0.3, 0.4]))
root = c.pb.RegionInfo(handle={mine.handle!r}, token={mine.token!r})
rpc("into root's region with its token", lambda: c.fetch_into(st, root))
rpc("a kernel into root's region", lambda: c.kernel(st, region=root))
req = c.pb.MeasureRequest(measurement=1, region=c.pb.RegionRef(handle=root.handle, token=root.token))
req.state.CopyFrom(c.ref(st))
rpc("a measurement into root's region", lambda: c.call("Measure", req))
fd = os.open({secret!r}, os.O_RDONLY)
rpc("hand a read-only fd for writing", lambda: c.hand(fd, qdpc.WRITE))
req = c.pb.RegisterRegionRequest(name="ro", writable=True, fd_ticket=c.hand(fd, qdpc.READ))
rpc("register a read-only fd writable", lambda: c.call("RegisterRegion", req))
os.close(fd)
c.release(st)
""")
        finally:
            self.root.unregister_region(mine)
        self.assertEqual(out["into root's region with its token"][0], "PERMISSION_DENIED", out)
        self.assertEqual(out["a kernel into root's region"][0], "PERMISSION_DENIED", out)
        self.assertEqual(out["a measurement into root's region"][0], "PERMISSION_DENIED", out)
        self.assertEqual(os.pread(fd, 4096, 0), b"\0" * 4096)
        os.close(fd)
        self.assertEqual(out["hand a read-only fd for writing"][0], "HANDOFF:PERMISSION_DENIED", out)
        self.assertEqual(out["register a read-only fd writable"][0], "PERMISSION_DENIED", out)
        with open(secret, "rb") as f:
            self.assertEqual(f.read(), b"\0" * 4096)
        self.assert_serving_and_empty()

    # ---- 9. a region is its owner's ----

    def test_9_a_region_is_unregistered_only_by_its_owner_and_each_has_its_own_limit(self):
        fd = os.memfd_create("qdp-abuse-root-in")
        os.ftruncate(fd, 4096)
        os.pwrite(fd, np.array([0.3, 0.4]).tobytes(), 0)
        mine = self.root.register_region(f"/proc/{os.getpid()}/fd/{fd}")
        try:
            out = self.as_user(EVE, f"""
ref = c.pb.RegionRef(handle={mine.handle!r}, token={mine.token!r})
rpc("unregister root's region with its token", lambda: c.call("UnregisterRegion", ref))
rpc("unregister root's region by handle", lambda: c.call("UnregisterRegion",
    c.pb.RegionRef(handle={mine.handle!r})))
m = c.pb.SharedMemory(region={mine.handle!r}, region_token={mine.token!r}, offset=0, length=16)
st = rpc("read root's region with its token",
         lambda: c.call("Encode", c.request("angle", 2, None, input_dtype="float64", shm=m)))
if st is not None:
    c.release(st.state)
""")
            self.assertEqual(self.root.status().regions, 1)  # still there, still root's
            st = self.root.call("Encode", self.root.request(
                "angle", 2, None, input_dtype="float64",
                shm=self.pb.SharedMemory(region=mine.handle, region_token=mine.token, length=16)))
            self.root.release(st.state)
        finally:
            self.root.unregister_region(mine)
            os.close(fd)
        self.assertEqual(out["unregister root's region with its token"][0], "PERMISSION_DENIED",
                         out)
        self.assertIn("registered by uid:0", out["unregister root's region with its token"][1])
        self.assertEqual(out["unregister root's region by handle"][0], "NOT_FOUND", out)
        self.assertEqual(out["read root's region with its token"][0], "OK", out)  # a capability
        # One identity stops at max_client_regions; another still registers.
        grab = f"""
infos = []
for i in range({MAX_CLIENT_REGIONS + 1}):
    fd = os.memfd_create("r")
    os.ftruncate(fd, 4096)
    req = c.pb.RegisterRegionRequest(name="r%d" % i, fd_ticket=c.hand(fd, qdpc.READ))
    os.close(fd)
    infos.append(rpc("region %d" % i, lambda: c.call("RegisterRegion", req)))
for info in infos:
    if info is not None:
        c.call("UnregisterRegion", c.pb.RegionRef(handle=info.handle, token=info.token))
"""
        mal = self.as_user(MAL, grab)
        for i in range(MAX_CLIENT_REGIONS):
            self.assertEqual(mal[f"region {i}"][0], "OK", mal)
        last = mal[f"region {MAX_CLIENT_REGIONS}"]
        self.assertEqual(last[0], "RESOURCE_EXHAUSTED", mal)
        self.assertIn(f"uid:{self.uid[MAL]} has {MAX_CLIENT_REGIONS} regions", last[1])
        self.assertIn(f"max_client_regions {MAX_CLIENT_REGIONS}", last[1])
        self.assertEqual(self.as_user(EVE, grab)[f"region {MAX_CLIENT_REGIONS - 1}"][0], "OK")
        self.assert_serving_and_empty()

    # ---- 10. a session is its owner's, and ends with its process ----

    def test_9_a_session_is_named_only_by_its_owner_and_ends_with_its_process(self):
        x = np.array([0.1, 0.2])
        sid = self.root.call("OpenSession", self.pb.OpenSessionRequest(label="root")).session
        req = self.root.request("angle", 2, x)
        req.session = sid
        mine = self.root.call("Encode", req).state
        try:
            out = self.as_user(EVE, f"""
ref = c.pb.SessionRef(session={sid!r})
rpc("beat root's session", lambda: c.call("Heartbeat", ref))
rpc("close root's session", lambda: c.call("CloseSession", ref))
req = c.request("angle", 2, np.array([0.3, 0.4]))
req.session = {sid!r}
rpc("encode into root's session", lambda: c.call("Encode", req))
# Eve's own session, with a state in it; the process then exits without closing either.
own = c.call("OpenSession", c.pb.OpenSessionRequest()).session
req.session = own
st = rpc("encode into her own session", lambda: c.call("Encode", req))
out["handle"] = [st.state.handle, own]
""")
            for case in ("beat root's session", "close root's session",
                         "encode into root's session"):
                self.assertEqual(out[case][0], "NOT_FOUND", out)
            self.assertEqual(out["encode into her own session"][0], "OK", out)
            # Root's session and its state are untouched; Eve's state went with her process
            # (the daemon's sweep, every expire_interval).
            self.assertEqual(self.root.call("Heartbeat", self.pb.SessionRef(session=sid)).session,
                             sid)
            self.root.call("Describe", self.root.ref(mine))
            deadline = time.monotonic() + 20
            while self.root.status().states > 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual(self.root.status().states, 1, "Eve's session state outlived her")
        finally:
            self.root.call("CloseSession", self.pb.SessionRef(session=sid))
        with self.assertRaises(grpc.RpcError) as cm:  # released with root's session
            self.root.call("Describe", self.root.ref(mine))
        self.assertEqual(cm.exception.code(), SC.NOT_FOUND)
        self.assert_serving_and_empty()

    # ---- 11. the smaller ones ----

    def test_9_tokens_are_compared_whole_and_refusals_are_not_failed_jobs(self):
        x = self.root.encode("angle", 2, np.array([0.1, 0.2]))
        before = self.root.status()
        # StateRef{handle, token + "\0junk"}: was accepted as the token.
        raw = (b"\x0a" + bytes([len(x.handle)]) + x.handle.encode() + b"\x12" +
               bytes([len(x.token) + 5]) + x.token.encode() + b"\0junk")
        with self.assertRaises(grpc.RpcError) as cm:
            self.root.raw("/qdp.Qdp/Describe", raw)
        self.assertEqual(cm.exception.code(), SC.INVALID_ARGUMENT)
        for _ in range(3):
            with self.assertRaises(grpc.RpcError):
                self.root.raw("/qdp.Qdp/Encode", b"\x0f\x01")
        after = self.root.status()
        self.assertEqual(after.jobs_failed, before.jobs_failed)
        self.root.release(x)

    def test_9_tls_principals_are_apart_and_certificates_are_checked(self):
        """Mutual TLS on TCP: a client certificate is an identity of its own (x509:<subject>),
        apart from every other certificate's and token's; a user cannot present another's
        certificate (its key is not theirs to read); a certificate of another CA, an expired one,
        none, or clear text do not connect."""
        head = f"""
port, ca, certs = {self.port}, {self.certs.ca!r}, {json.dumps(self.cert)!r}
certs = json.loads(certs)
def rd(p):
    with open(p, 'rb') as f:
        return f.read()
def tcp(cert=None, key=None, plain=False):
    if plain:
        ch = grpc.insecure_channel(f"127.0.0.1:{{port}}")
    else:
        ch = grpc.secure_channel(f"127.0.0.1:{{port}}", grpc.ssl_channel_credentials(
            rd(ca), rd(key) if key else None, rd(cert) if cert else None))
    def m(name, req, rep):
        return ch.unary_unary("/qdp.Qdp/" + name, getattr(c.pb, req).SerializeToString,
                              getattr(c.pb, rep).FromString)
    return m
"""
        out = self.as_user(EVE, head + f"""
m = tcp(*certs[{EVE!r}])
r = c.request("angle", 2, np.array([0.1, 0.2]))
st = rpc("encode", lambda: m("Encode", "EncodeRequest", "EncodeReply")(r, timeout=30).state)
out["owner"], out["handle"], out["token"] = st.owner, st.handle, st.token
ls = rpc("list", lambda: m("List", "ListRequest", "ListReply")(c.pb.ListRequest(), timeout=30))
out["listed"] = [s.handle for s in ls.states]
""")
        self.assertEqual(out["encode"], ["OK", ""], out)
        self.assertEqual(out["owner"], f"x509:O=qdp-test,CN={EVE}")  # RFC 2253: last RDN first
        self.assertEqual(out["listed"], [out["handle"]])
        h, tok = out["handle"], out["token"]
        out = self.as_user(MAL, head + f"""
h = {h!r}
m = tcp(*certs[{MAL!r}])
ls = rpc("list", lambda: m("List", "ListRequest", "ListReply")(c.pb.ListRequest(), timeout=30))
out["listed"] = [s.handle for s in ls.states]
rpc("list all", lambda: m("List", "ListRequest", "ListReply")(c.pb.ListRequest(all=True),
                                                                timeout=30))
rpc("release by handle", lambda: m("Release", "StateRef", "ReleaseReply")(
    c.pb.StateRef(handle=h), timeout=30))
rpc("describe by handle", lambda: m("Describe", "DescribeRequest", "StateInfo")(
    c.pb.DescribeRequest(handle=h), timeout=30))
rpc("read eve's key", lambda: rd(certs[{EVE!r}][1]))
rpc("eve's certificate, own key", lambda: tcp(certs[{EVE!r}][0], certs[{MAL!r}][1])(
    "Status", "StatusRequest", "StatusReply")(c.pb.StatusRequest(), timeout=30))
for what, args in (("wrong CA", certs["wrong-ca"]), ("expired", certs["expired"]),
                   ("no certificate", (None, None))):
    rpc(what, lambda: tcp(*args)("Status", "StatusRequest", "StatusReply")(
        c.pb.StatusRequest(), timeout=30, metadata=(("authorization", "Bearer {TOKEN}"),)))
rpc("clear text", lambda: tcp(plain=True)("Status", "StatusRequest", "StatusReply")(
    c.pb.StatusRequest(), timeout=30, metadata=(("authorization", "Bearer {TOKEN}"),)))
""")
        self.assertEqual(out["list"], ["OK", ""], out)
        self.assertEqual(out["listed"], [])
        self.assertEqual(out["list all"][0], "PERMISSION_DENIED", out)
        self.assertIn(out["release by handle"][0], ("NOT_FOUND", "PERMISSION_DENIED"), out)
        self.assertIn(out["describe by handle"][0], ("NOT_FOUND", "PERMISSION_DENIED"), out)
        self.assertEqual(out["read eve's key"][0], "LOCAL:PermissionError", out)
        for what in ("eve's certificate, own key", "wrong CA", "expired", "no certificate",
                     "clear text"):
            self.assertEqual(out[what][0], "UNAVAILABLE", (what, out[what]))
        # Eve's state is whole, and hers: she releases it by handle alone, as an owner may.
        self.assertEqual(self.root.fetch(self.pb.StateRef(handle=h, token=tok)).size, 4)
        out = self.as_user(EVE, head + f"""
m = tcp(*certs[{EVE!r}])
rpc("release", lambda: m("Release", "StateRef", "ReleaseReply")(
    c.pb.StateRef(handle={h!r}), timeout=30))
""")
        self.assertEqual(out["release"], ["OK", ""], out)
        self.assert_serving_and_empty()

    def test_z_nothing_leaked(self):
        # Last (tests run in name order): no descriptor handed over is still held, and no pidfd of
        # a closed connection (closed by the listener's sweep, once a second).
        deadline = time.monotonic() + 3
        now = self.daemon_fds()
        while len(now) != len(self.fds_at_start) and time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.daemon_fds()
        extra = {k: v for k, v in now.items() if self.fds_at_start.get(k) != v}
        if len(now) != len(self.fds_at_start):
            # Which kind of socket it is: a Unix one of this daemon, or TCP.
            for k, v in extra.items():
                ino = v[len("socket:["):-1] if v.startswith("socket:[") else None
                for t in ("unix", "tcp", "tcp6"):
                    for line in open(f"/proc/net/{t}"):
                        if ino and ino in line.split():
                            extra[k] += f" ({t}: {line.strip()})"
        self.assertEqual(len(now), len(self.fds_at_start), extra)
        self.assert_serving_and_empty()


if __name__ == "__main__":
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd"):
        print("skip: the abuse suite makes users and runs the daemon as root")
        sys.exit(77)
    make_users()
    try:
        unittest.main(verbosity=2)
    finally:
        remove_users()
