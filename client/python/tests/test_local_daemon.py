"""A private qdpd on demand: qdp.Client() with no daemon answering starts one, shares it with the
user's other processes and workers, and nothing of it is left once the last of them exits,
however it exits; qdp.LocalDaemon is the explicit form.

Every test runs in a user of its own: HOME, XDG_RUNTIME_DIR and TMPDIR in its tmp_path, and the
default socket there too (local_child.py), so nothing of the machine's is found or touched. A
test's processes are those with its TMPDIR in their environment; the fixture checks that none is
left, and kills and reports any that is.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import stat
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest

import qdp
import qdp._local
import qdp._tools
from conftest import Daemon, qdpd_path

CHILD = str(pathlib.Path(__file__).with_name("local_child.py"))


def wait_for(what: Callable[[], Any], seconds: float = 15.0) -> Any:
    """``what()`` once it is true, polled for up to ``seconds``; its last value otherwise."""
    deadline = time.monotonic() + seconds
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _as_a_terminal_job() -> None:
    """A session of its own, with Ctrl-C's default action, as a shell's foreground job has it
    even when this test runs where SIGINT is ignored (a background job of a script)."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class User:
    """A user's environment in a test's tmp_path, and what runs and lies there."""

    def __init__(self, root: pathlib.Path) -> None:
        self.run_dir = root / "run"
        self.tmp = root / "tmp"
        for d in (self.run_dir, self.tmp, root / "home"):
            d.mkdir()
        os.chmod(self.run_dir, 0o700)
        self.folder = self.run_dir / "qdp"  # the private daemon's
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("QDP_TARGET", "QDP_SOCKET", "QDP_AUTOSTART")}
        self.env.update(HOME=str(root / "home"), XDG_RUNTIME_DIR=str(self.run_dir),
                        TMPDIR=str(self.tmp), QDPD=qdpd_path())

    def run(self, *args: str, ok: bool = True, **env: str) -> Dict[str, Any]:
        """local_child.py's JSON line."""
        r = subprocess.run([sys.executable, CHILD, *args], env=dict(self.env, **env),
                           capture_output=True, text=True, timeout=120)
        if ok:
            assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.splitlines()[-1]) if r.stdout.strip() else \
            {"returncode": r.returncode, "stderr": r.stderr}

    def holder(self, seconds: float = 60, session: bool = False
               ) -> "tuple[subprocess.Popen[str], Dict[str, Any]]":
        """A child that holds a client (in a session of its own: as a terminal's job); what it
        found."""
        p = subprocess.Popen([sys.executable, CHILD, "hold", str(seconds)], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_as_a_terminal_job if session else None)
        line = p.stdout.readline()
        if not line:
            p.kill()
            raise AssertionError(p.communicate()[1][-3000:])
        return p, json.loads(line)

    def processes(self) -> List[int]:
        """The processes of this user's environment but this one (a reaper, qdpd, children)."""
        key = f"TMPDIR={self.tmp}".encode()
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    if key in f.read().split(b"\0"):
                        out.append(int(p))
            except OSError:
                pass
        return out

    def files(self) -> List[str]:
        """What lies in the runtime and temporary folders."""
        return sorted(str(p) for d in (self.run_dir, self.tmp) for p in d.rglob("*"))

    def gone(self, seconds: float = 15.0) -> bool:
        """Whether, within ``seconds``, nothing of the daemon runs or lies on disk."""
        return wait_for(lambda: not self.processes() and not self.files(), seconds)


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (an exited process its parent, here often init, has not
    reaped yet) does not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def user(tmp_path: pathlib.Path) -> Iterator[User]:
    if not os.access(qdpd_path(), os.X_OK):
        pytest.skip(f"no qdpd at {qdpd_path()}: build it (sh deploy/build.sh) or set QDPD")
    u = User(tmp_path)
    yield u
    left = wait_for(lambda: not u.processes()) or u.processes()
    if left is not True:
        text = "; ".join(f"{p}: {cmdline(p)}" for p in left)
        for p in left:
            os.kill(p, signal.SIGKILL)
        pytest.fail(f"processes left running: {text}")


@pytest.fixture
def here(user: User, monkeypatch: pytest.MonkeyPatch) -> User:
    """The user's environment in this process too, for LocalDaemon used here."""
    for k in ("QDP_TARGET", "QDP_SOCKET", "QDP_AUTOSTART"):
        monkeypatch.delenv(k, raising=False)
    for k in ("HOME", "XDG_RUNTIME_DIR", "TMPDIR", "QDPD"):
        monkeypatch.setenv(k, user.env[k])
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    return user


def amplitudes(out: Dict[str, Any]) -> List[complex]:
    return [complex(re, im) for re, im in out["state"]]


def is_1234(out: Dict[str, Any]) -> bool:
    """Whether the child encoded [1, 2, 3, 4] as amplitudes: x / |x|."""
    return amplitudes(out) == pytest.approx([x / math.sqrt(30) for x in (1, 2, 3, 4)],
                                            abs=1e-15)


def test_a_client_starts_a_private_daemon_when_none_answers(user: User) -> None:
    p, found = user.holder()
    try:
        assert found["target"] == f"unix:{user.folder}/local.sock"
        assert alive(found["pid"]) and "--devices=auto" in cmdline(found["pid"])
        for path, mode in ((user.folder, 0o700), (user.folder / "local.sock", 0o600)):
            st = os.stat(path)
            assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == mode, path
        info = json.loads((user.folder / "local.json").read_text())
        assert info["qdpd_pid"] == found["pid"] and info["log"] == found["log"]
        assert "listening on unix:" in pathlib.Path(found["log"]).read_text()
        # Its state is the amplitude encoding of [1, 2, 3, 4]: x / |x|.
        out = user.run("encode")
        assert out["pid"] == found["pid"]
        assert is_1234(out)
    finally:
        p.kill()
        p.wait()
    assert user.gone()


def test_the_last_process_exiting_leaves_nothing(user: User) -> None:
    out = user.run("encode")
    assert out["pid"] and out["target"].endswith("/local.sock")
    assert user.gone(), f"left: {user.processes()} {user.files()}"
    assert not alive(out["pid"])


def test_a_sigkilled_last_process_leaves_nothing(user: User) -> None:
    p, found = user.holder()
    reaper = json.loads((user.folder / "local.json").read_text())["reaper_pid"]
    assert alive(reaper) and alive(found["pid"])
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.monotonic()
    assert user.gone(), f"left: {[cmdline(q) for q in user.processes()]} {user.files()}"
    assert not alive(found["pid"]) and not alive(reaper)
    print(f"bench op=local-daemon-reaped s={time.monotonic() - t0:.2f}")


def test_a_process_with_many_descriptors_starts_it(user: User) -> None:
    out = user.run("many_files")
    if "skip" in out:
        pytest.skip(out["skip"])
    assert is_1234(out)
    assert user.gone()


def test_a_killed_reaper_takes_qdpd_with_it(user: User) -> None:
    """qdpd dies with its reaper (PR_SET_PDEATHSIG), and the next process starts a daemon over
    what the killed reaper left."""
    p, found = user.holder()
    try:
        reaper = json.loads((user.folder / "local.json").read_text())["reaper_pid"]
        os.kill(reaper, signal.SIGKILL)
        assert wait_for(lambda: not alive(found["pid"]), 10), "qdpd outlived its reaper"
        out = user.run("encode")
        assert out["pid"] != found["pid"]
        assert is_1234(out)
    finally:
        p.kill()
        p.wait()
    assert user.gone()


def test_two_processes_share_one_daemon(user: User) -> None:
    p, first = user.holder()
    try:
        second = user.run("encode")
        assert second["pid"] == first["pid"] and second["target"] == first["target"]
        assert second["log"] == first["log"]
        assert alive(first["pid"])  # the second's exit left it to the first
    finally:
        p.kill()
        p.wait()
    assert user.gone()


def test_ctrl_c_in_the_starters_terminal_does_not_reach_the_daemon(user: User) -> None:
    """A Ctrl-C goes to the terminal's foreground process group: the starter's, not the
    daemon's (the reaper and qdpd run in a session of their own)."""
    starter, found = user.holder(session=True)
    other, _ = user.holder()
    try:
        os.killpg(starter.pid, signal.SIGINT)
        assert starter.wait(10) != 0  # KeyboardInterrupt
        time.sleep(0.5)
        assert alive(found["pid"])
        out = user.run("encode")
        assert out["pid"] == found["pid"]
    finally:
        for p in (starter, other):
            p.kill()
            p.wait()
    assert user.gone()


def test_a_daemon_at_the_default_socket_is_preferred(user: User) -> None:
    user.folder.mkdir(mode=0o700)
    d = Daemon(str(user.folder), devices="cpu:1")
    try:
        out = user.run("encode")
        assert out["target"] == d.target and out["pid"] is None
        assert not [f for f in user.files() if "local." in f]
    finally:
        assert d.stop() == 0


def test_autostart_off_gives_the_error_of_no_daemon(user: User) -> None:
    out = user.run("status", QDP_AUTOSTART="0")
    assert out["error"] == "Unavailable"
    for words in ("Is qdpd running?", "QDP_AUTOSTART", "LocalDaemon", "QDP_TARGET"):
        assert words in out["message"]
    assert not user.files() and not user.processes()
    out = user.run("status", QDP_AUTOSTART="yes please")
    assert out["error"] == "InvalidArgument" and "QDP_AUTOSTART='yes please'" in out["message"]


def test_an_explicit_target_never_starts_a_daemon(user: User) -> None:
    out = user.run("status", QDP_SOCKET=str(user.tmp / "none.sock"))
    assert out["error"] == "Unavailable" and "none.sock" in out["message"]
    assert not user.files() and not user.processes()


@pytest.mark.parametrize("program, last_line", [
    ("#!/bin/sh\necho 'starting' >&2\necho 'qdpd: no devices: it broke' >&2\nexit 1\n",
     "qdpd: no devices: it broke"),
    ("not a program\n", "Exec format error"),
], ids=["exits", "cannot-run"])
def test_a_qdpd_that_fails_to_start_names_its_log(user: User, program: str,
                                                  last_line: str) -> None:
    fake = user.tmp.parent / "qdpd-fails"
    fake.write_text(program)
    fake.chmod(0o755)
    out = user.run("status", QDPD=str(fake))
    log = user.folder / "local.log"
    assert out["error"] == "Unavailable"
    assert f"its log {log} ends with:" in out["message"]
    assert out["message"].splitlines()[-1].startswith("    ")
    assert last_line in out["message"].splitlines()[-1]
    assert "QDP_AUTOSTART=0" in out["message"]  # why a daemon was started at all
    # The log stays for the user to read; nothing else does, and nothing runs (the reaper may
    # still be on its way out when the error comes back).
    assert last_line in log.read_text() and user.files() == [str(user.folder), str(log)]
    assert wait_for(lambda: not user.processes()), user.processes()


def test_a_daemon_that_dies_is_named_with_its_log(user: User) -> None:
    out = user.run("killed")
    assert out["error"] == "Unavailable", out
    assert f"The private qdpd (pid {out['pid']}) has exited" in out["message"]
    assert f"its log {out['log']} ends with:" in out["message"]
    assert "listening on unix:" in out["message"]
    assert wait_for(lambda: not user.processes())


def test_a_forked_child_holds_nothing_of_its_parent_and_joins(user: User) -> None:
    out = user.run("forked")
    assert out["child"] == {"running": False, "held": False, "target": out["child"]["target"],
                            "pid": out["parent"], "log": out["child"]["log"]}
    assert out["parent_running"]  # the child's stop() did not stop it
    assert user.gone()


def test_a_spawned_dataloader_worker_uses_the_same_daemon(user: User) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    out = user.run("loader")
    assert out["workers"] == [out["pid"], out["pid"]]
    assert user.gone()


def test_local_daemon_options_and_its_client(here: User) -> None:
    with qdp.LocalDaemon(devices="cpu:2", memory="32Mi", store_budget="48Mi",
                         log=here.tmp / "mine.log") as d, d.client() as c:
        st = c.status()
        assert [x.name for x in st.devices] == ["cpu:0", "cpu:1"]
        assert st.budget_bytes == 48 << 20 and c.daemon is d
        args = cmdline(d.pid)
        assert "--device_budget=32Mi" in args and "--store_budget=48Mi" in args
        assert d.log_path == str(here.tmp / "mine.log") and d.target.endswith("/local.sock")
        with pytest.raises(qdp.FailedPrecondition) as e:
            qdp.LocalDaemon(devices="cpu:2").start()  # one private daemon runs per user
        assert f"store_budget='{48 << 20}'" in str(e.value) and f"pid {d.pid}" in str(e.value)
        with qdp.LocalDaemon(devices="cpu:2", memory=32 << 20, store_budget="48Mi",
                             log=here.tmp / "mine.log") as same:
            assert same.pid == d.pid  # the same options, however written
        assert d.running
        pid = d.pid
    assert not d.running
    assert wait_for(lambda: not alive(pid))
    # A log of the user's own is kept; nothing else is.
    assert wait_for(lambda: here.files() == [str(here.tmp / "mine.log")])


def test_bad_options_raise_before_anything_starts(here: User,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [(dict(store_budget="8Q"), "store_budget", "unknown size suffix 'Q'"),
             (dict(no_such_option=1), "no_such_option", "store_budget, client_budget"),
             (dict(socket="/tmp/x.sock"), "socket", "private folder"),
             (dict(memory="1Gi", device_budget="2Gi"), "memory", "give one"),
             (dict(memory=-1), "memory", "an int >= 0"),
             (dict(devices=[0, "a"]), "devices", "GPU ordinals"),
             (dict(lease_grace=[1]), "lease_grace", "a str, int, float or bool"),
             (dict(start_timeout=0), "start_timeout", "seconds > 0")]
    for kwargs, field, words in cases:
        with pytest.raises(qdp.InvalidArgument) as e:
            qdp.LocalDaemon(**kwargs)
        assert e.value.field == field and words in str(e.value), (kwargs, str(e.value))
    assert not here.files() and not here.processes()


def test_the_qdpd_program_is_found_in_order(here: User, monkeypatch: pytest.MonkeyPatch) -> None:
    """$QDPD, else the package's own (qdp._tools.binary: None in a client-only install), else
    PATH's; else an error that says how to get one."""
    bin_dir = here.tmp.parent / "bin"
    bin_dir.mkdir()
    on_path = bin_dir / "qdpd"
    on_path.symlink_to(qdpd_path())
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(qdp._tools, "binary", lambda name: f"/bundled/{name}")
    assert qdp._local.find_qdpd() == qdpd_path()  # QDPD
    monkeypatch.delenv("QDPD")
    assert qdp._local.find_qdpd() == "/bundled/qdpd"
    monkeypatch.setattr(qdp._tools, "binary", lambda name: None)  # a client-only install
    assert qdp._local.find_qdpd() == str(on_path)
    on_path.unlink()
    with pytest.raises(qdp.NotFound) as e:
        qdp.LocalDaemon()
    for words in ("pip install", "meson setup build", "QDPD=", "QDP_TARGET"):
        assert words in str(e.value)
    monkeypatch.setenv("QDPD", str(here.tmp / "nothing"))
    with pytest.raises(qdp.NotFound, match=f"QDPD='{here.tmp}/nothing' is not an executable"):
        qdp.LocalDaemon()


def test_a_folder_that_is_not_private_is_refused(here: User, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    # XDG_RUNTIME_DIR open to others: not used; the temporary folder's qdp-UID is.
    os.chmod(here.run_dir, 0o755)
    assert qdp._local.private_folder() == str(here.tmp / f"qdp-{os.geteuid()}")
    os.rmdir(here.tmp / f"qdp-{os.geteuid()}")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    folder = here.tmp / f"qdp-{os.geteuid()}"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    with pytest.raises(qdp.PermissionDenied, match="of mode 0755, open to other users") as e:
        qdp.LocalDaemon().start()
    assert str(folder) in str(e.value)
    folder.rmdir()
    mine = here.tmp / "elsewhere"
    mine.mkdir(mode=0o700)
    folder.symlink_to(mine)
    with pytest.raises(qdp.PermissionDenied, match="is a link"):
        qdp.LocalDaemon().start()
    folder.unlink()
    # Another user's: this process takes the uid of its folder's name to be someone else's.
    uid = os.geteuid()
    other = here.tmp / f"qdp-{uid + 1}"
    other.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    with pytest.raises(qdp.PermissionDenied, match=f"owned by uid {uid}, not by this user"):
        qdp.LocalDaemon().start()
    assert not list(mine.iterdir()) and not list(other.iterdir())
    assert not here.processes()


def test_a_quick_reopen_finds_the_same_daemon(here: User) -> None:
    """The daemon outlives its last user by a grace of 2 s: a process that lets it go and takes
    it again at once (a loop of clients, a loader's next epoch) finds the same one."""
    with qdp.LocalDaemon(devices="cpu:1") as d:
        pid = d.pid
    with qdp.LocalDaemon(devices="cpu:1") as d:
        assert d.pid == pid
    assert here.gone()


def test_a_qdpd_that_does_not_answer_times_out(here: User, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    fake = here.tmp.parent / "qdpd-hangs"
    fake.write_text("#!/bin/sh\necho 'waiting for nothing' >&2\nexec sleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("QDPD", str(fake))
    t0 = time.monotonic()
    with pytest.raises(qdp.DeadlineExceeded) as e:
        qdp.LocalDaemon(start_timeout=1).start()
    assert 1 <= time.monotonic() - t0 < 5
    text = str(e.value)
    assert "within 1 s (start_timeout)" in text and "    waiting for nothing" in text
    assert f"its log {here.folder}/local.log" in text
    # Nobody waits for it any more: the reaper stops it after its grace.
    assert wait_for(lambda: not here.processes())


def test_a_token_reaches_qdpd_off_its_command_line(here: User) -> None:
    """Every user of the node may read a command line (ps): a TCP token goes to qdpd through its
    environment."""
    token = "local-token-0123456789abcdef"
    with qdp.LocalDaemon(devices="cpu:1", tcp="127.0.0.1:0", tcp_token=token,
                         tcp_plaintext="yes") as d:
        reaper = json.loads((here.folder / "local.json").read_text())["reaper_pid"]
        # Each command line is read (it names its program's socket or script) and lacks it.
        for pid, names in ((d.pid, "local.sock"), (reaper, "_reaper.py")):
            assert token not in cmdline(pid) and names in cmdline(pid)
        # qdpd says where it listens just after its socket accepts, which is what LocalDaemon
        # waits for: the line may come a moment later.
        listening = wait_for(lambda: [ln for ln in pathlib.Path(d.log_path).read_text()
                                      .splitlines() if ln.startswith("listening on 127.0.0.1:")])
        assert len(listening) == 1, pathlib.Path(d.log_path).read_text()
        tcp = listening[0].removeprefix("listening on ")
        with qdp.Client(tcp, token=token) as c:
            assert c.status().devices[0].name == "cpu:0"
        with qdp.Client(tcp, token="wrong-" + token) as c, pytest.raises(qdp.Unauthenticated):
            c.status()
    assert here.gone()
