"""Integration: qdpctl against a real qdpd — exit codes, --json output, tables, help, inputs.

Run by with_qdpd.sh (QDP_SOCKET and QDP_TEST_DIR set) with QDPCTL and QDP_DESC in the
environment.
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
from multiprocessing import shared_memory

import numpy as np

import qdpref

COMMANDS = ("status", "health", "encode", "plan", "describe", "ls", "fetch", "export", "rm",
            "top")


class Qdpctl(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.exe = os.environ["QDPCTL"]
        cls.dir = os.environ["QDP_TEST_DIR"]
        cls.rng = np.random.default_rng(7)

    def run_ctl(self, *args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run([self.exe, *args], capture_output=True, text=True, timeout=120,
                              env=e)

    def ok(self, *args):
        p = self.run_ctl(*args)
        self.assertEqual(p.returncode, 0, f"qdpctl {' '.join(args)}: {p.stderr}")
        return p

    def js(self, *args):
        d = json.loads(self.ok("--json", *args).stdout)
        self.assertEqual(d.pop("schema"), 1, f"qdpctl --json {' '.join(args)}: no schema 1")
        return d

    def refused(self, code, *args):
        """Runs with --json; requires exit `code` and returns the parsed error object."""
        p = self.run_ctl("--json", *args)
        self.assertEqual(p.returncode, code, f"qdpctl {' '.join(args)}: {p.stdout} {p.stderr}")
        self.assertTrue(p.stderr.strip(), "no message on stderr")
        return json.loads(p.stdout)["error"] if p.stdout.strip() else None

    # ---- progress ----

    def test_progress_names_the_phase_the_call_waits_in(self):
        """With --progress, an encode whose bytes never move here says it waits for the daemon
        and counts the seconds (a 23-qubit iqp state: 0.3 s on a 2-core VM, where the line is
        drawn every 0.1 s); an upload's bar reaches 100% before that line; both end their
        line."""
        values = ",".join(["0.1"] * (23 + 23 * 22 // 2))
        p = self.ok("--progress", "encode", "--encoding", "iqp", "--qubits", "23", "--values",
                    values)
        lines = p.stderr.replace("\r", "\n").split("\n")
        waits = [ln.strip() for ln in lines if ln.startswith("encode: encoding on the daemon, ")]
        self.assertTrue(waits, p.stderr)
        seconds = [float(w.rsplit(", ", 1)[1].split()[0]) for w in waits]
        self.assertEqual(seconds, sorted(seconds))  # counted up, the last the phase's whole
        self.assertTrue(p.stderr.endswith("\n"), repr(p.stderr[-80:]))
        ref = p.stdout.split()[1]
        self.ok("rm", ref)
        path = os.path.join(self.dir, "wait.npy")
        np.save(path, self.rng.uniform(0.1, 1, size=1 << 22))
        p = self.ok("--progress", "encode", "--encoding", "amplitude", "--qubits", "22",
                    "--input", path, "--chunk-bytes", "1048576")
        self.assertIn("100.0%", p.stderr)
        phase = p.stderr.find("encode: encoding on the daemon, ")
        self.assertTrue(phase < 0 or phase > p.stderr.find("100.0%"), p.stderr)
        self.ok("rm", p.stdout.split()[1])

    # ---- sizes ----

    def test_sizes_print_for_people_and_as_bytes_with_bytes(self):
        """Hand-computed: 3 x 2^5 complex128 amplitudes are 1536 B = 1.5 KiB, 2^16 of them
        1 MiB; --bytes gives the counts; JSON always has counts."""
        small = self.js("encode", "--encoding", "amplitude", "--qubits", "5", "--rows", "3",
                        "--values", ",".join(["1"] * 96))
        big = self.js("encode", "--encoding", "phase", "--qubits", "16",
                      "--values", ",".join(["0.5"] * 16))
        self.assertEqual((small["bytes"], big["bytes"]), (1536, 1 << 20))
        for e, human, raw in ((small, "1.5 KiB", "1536"), (big, "1 MiB", "1048576")):
            d = self.ok("describe", e["ref"]).stdout
            self.assertRegex(d, rf"complex128, {re.escape(human)}\n")
            self.assertRegex(self.ok("--bytes", "describe", e["ref"]).stdout,
                             rf"complex128, {raw} bytes\n")
            self.assertRegex(d, rf"\s{re.escape(human)}\n")  # the shard's BYTES column
        ls = self.ok("ls").stdout
        self.assertRegex(ls, r"\s1\.5 KiB\s")
        self.assertRegex(self.ok("--bytes", "ls").stdout, r"\s1048576\s")
        st = self.ok("status").stdout
        self.assertRegex(st, r"states \d+, [\d.]+ (B|KiB|MiB|GiB) used")
        self.assertRegex(self.ok("status", "--bytes").stdout, r"states \d+, \d+ bytes used")
        for e, freed in ((small, "1.5 KiB"), (big, "1048576 bytes")):
            out = self.ok(*(("--bytes",) if "bytes" in freed else ()), "rm", e["ref"]).stdout
            self.assertIn(f"({freed} freed)", out)

    def test_ls_is_oldest_first_with_the_callers_states_marked(self):
        made = [self.js("encode", "--encoding", "angle", "--qubits", "2", "--values", v)["ref"]
                for v in ("0.1,0.2", "0.3,0.4", "0.5,0.6")]
        handles = [r.split(":")[0] for r in made]
        states = self.js("ls")["states"]
        created = [s["created_unix_ms"] for s in states]
        self.assertEqual(created, sorted(created))
        listed = [s["handle"] for s in states]
        self.assertEqual([h for h in listed if h in handles], handles)  # made in this order
        self.assertTrue(all(s["yours"] for s in states))  # a Unix caller: its uid's states
        out = self.ok("ls", "--all").stdout
        for h in handles:
            self.assertRegex(out, rf"\n{h} \*\s")
        self.assertIn(f"* yours (uid:{os.getuid()})", out)
        self.assertNotIn(" *", self.ok("ls").stdout)  # only yours are listed: nothing to mark
        self.ok("rm", *made)

    # ---- help and usage ----

    def test_help_describes_commands_exit_codes_and_inputs(self):
        p = self.ok("--help")
        for c in COMMANDS:
            self.assertIn(c, p.stdout)
        self.assertIn("Exit status", p.stdout)
        for code in ("0", "1", "2", "3", "4"):
            self.assertRegex(p.stdout, rf"\n  {code}  ")
        for c in COMMANDS:
            h = self.ok(c, "--help").stdout
            self.assertIn(f"qdpctl {c}", h)
            self.assertIn("Exit status", h)
        enc = self.ok("encode", "--help").stdout
        for opt in ("--encoding", "--qubits", "--dtype", "--policy", "--devices", "--ttl",
                    "--label", "--values", "--input", "--server-file", "--shm", "--offset",
                    "--length", "--rows", "--cols", "--input-dtype", "Examples"):
            self.assertIn(opt, enc)

    def test_usage_errors_exit_2_before_connecting(self):
        bad = [
            (),
            ("frobnicate",),
            ("encode", "--qubits", "2", "--values", "1,2"),
            ("encode", "--encoding", "amplitude", "--qubits", "two", "--values", "1"),
            ("encode", "--encoding", "sideways", "--qubits", "2", "--values", "1"),
            ("encode", "--encoding", "amplitude", "--qubits", "2"),
            ("encode", "--encoding", "amplitude", "--qubits", "2", "--values", "1,,2"),
            ("encode", "--encoding", "amplitude", "--qubits", "2", "--values", "1,x"),
            ("encode", "--encoding", "amplitude", "--qubits", "2", "--values", "1",
             "--server-file", "/x.npy"),
            ("encode", "--encoding", "amplitude", "--qubits", "2", "--shm", "/x"),
            ("encode", "--encoding", "amplitude", "--qubits", "2", "--values", "1",
             "--dtype", "float32"),
            ("encode", "--encoding", "amplitude", "--qubits", "-1", "--values", "1"),
            ("describe",),
            ("describe", "no-colon"),
            ("describe", "a:b", "c:d"),
            ("describe", "--writable", "a:b"),
            ("fetch", "a:b"),
            ("export", "a:b"),
            ("status", "--bogus"),
            ("rm",),
        ]
        # A socket that does not exist: a usage error must win over "cannot connect".
        env = {"QDP_SOCKET": os.path.join(self.dir, "nobody.sock")}
        env.pop("QDP_TARGET", None)
        for args in bad:
            p = self.run_ctl(*args, env={**env, "QDP_TARGET": ""})
            self.assertEqual(p.returncode, 2, f"qdpctl {' '.join(args)}: {p.stderr}")
            self.assertIn("qdpctl", p.stderr)
            self.assertEqual(p.stdout, "")  # without --json, nothing on stdout
            # With --json (first or last), the same error as JSON on stdout, schema 1.
            for j in (("--json", *args), (*args, "--json")):
                p = self.run_ctl(*j, env={**env, "QDP_TARGET": ""})
                self.assertEqual(p.returncode, 2, f"qdpctl {' '.join(j)}: {p.stderr}")
                d = json.loads(p.stdout)
                self.assertEqual(d["schema"], 1)
                self.assertEqual((d["error"]["code"], d["error"]["exit"]), ("USAGE", 2))
                self.assertIn(d["error"]["message"], p.stderr)

    def test_a_slip_gets_a_did_you_mean(self):
        for args, want in ((("stauts",), "did you mean 'status'?"),
                           (("desribe", "a:b"), "did you mean 'describe'?"),
                           (("encode", "--encodng", "angle"), "did you mean '--encoding'?"),
                           (("fetch", "a:b", "--ouptut", "x.npy"), "did you mean '--output'?")):
            p = self.run_ctl(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(want, p.stderr)
        p = self.run_ctl("frobnicate")  # nothing near: no guess
        self.assertEqual(p.returncode, 2)
        self.assertNotIn("did you mean", p.stderr)

    def test_no_daemon_exits_3(self):
        target = "unix:" + os.path.join(self.dir, "nobody.sock")
        for args in (("status",), ("health",), ("ls",), ("describe", "a:b"),
                     ("encode", "--encoding", "phase", "--qubits", "1", "--values", "0.5")):
            e = self.refused(3, "--target", target, *args)
            self.assertEqual(e["code"], "QDP_ERR_UNAVAILABLE")
            self.assertIn("nobody.sock", e["message"])

    # ---- reading ----

    def test_status_and_health(self):
        s = self.js("status")
        self.assertEqual(s["backend"], "cpu")
        self.assertEqual([d["name"] for d in s["devices"]], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
        for d in s["devices"]:
            self.assertEqual(d["kind"], "cpu")
            self.assertGreater(d["budget_bytes"], 0)
        self.assertGreater(s["max_qubits"], 20)
        # The CPU backend's devices share one memory: every ordered pair is a "host" link.
        self.assertEqual(s["topology_source"], "host")
        self.assertEqual(len(s["links"]), 16)
        for link in s["links"]:
            self.assertEqual(link["kind"], "self" if link["from"] == link["to"] else "host")
            self.assertTrue(link["peer"])
        out = self.ok("status").stdout
        table, _, matrix = out.partition("\ntopology (host")
        self.assertRegex(table, r"\nDEVICE +KIND +RANK +HOST +MODEL +NUMA")
        self.assertEqual(len(re.findall(r"\ncpu:\d ", table)), 4)
        rows = re.findall(r"\n(cpu:\d)  +(.*)", matrix)
        self.assertEqual([r[0] for r in rows], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
        for i, (_, cells) in enumerate(rows):
            self.assertEqual(cells.split(), ["X" if j == i else "HOST" for j in range(4)])
        self.assertEqual(self.js("health")["status"], "SERVING")
        self.assertEqual(self.ok("health").stdout.strip(), "SERVING")

    def test_a_ttl_above_max_ttl_is_capped_and_said(self):
        """A --ttl above the daemon's max_ttl (86400 s by default) gets max_ttl, and qdpctl says
        so: a warning on stderr, the expiry line, and ttl_capped in --json; a ttl within it is
        kept as asked, with no warning."""
        p = self.run_ctl("--json", "encode", "--encoding", "amplitude", "--qubits", "1",
                         "--values", "3,4", "--ttl", "1000000000")
        self.assertEqual(p.returncode, 0, p.stderr)
        e = json.loads(p.stdout)
        self.assertEqual((e["ttl_seconds"], e["ttl_capped"]), (86400, True))
        self.assertEqual(e["expires_unix_ms"] - e["created_unix_ms"], 86400_000)
        self.assertIn("above the daemon's max_ttl; the state expires in 86400 s", p.stderr)
        human = self.ok("describe", e["ref"]).stdout
        self.assertRegex(human, r"expires    \S+ \(ttl 86400 s, capped at the daemon's max_ttl\)")
        self.ok("rm", e["ref"])
        p = self.run_ctl("--json", "encode", "--encoding", "amplitude", "--qubits", "1",
                         "--values", "3,4", "--ttl", "600")
        self.assertEqual(p.returncode, 0, p.stderr)
        e = json.loads(p.stdout)
        self.assertEqual((e["ttl_seconds"], e["ttl_capped"]), (600, False))
        self.assertNotIn("max_ttl", p.stderr)
        self.ok("rm", e["ref"])

    def test_encode_describe_ls_rm_cycle(self):
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "2", "--values", "3,4",
                    "--label", "cycle", "--ttl", "600", "--policy", "single", "--devices",
                    "cpu:1")
        handle, token = e["ref"].split(":", 1)
        self.assertEqual((e["handle"], e["token"]), (handle, token))
        self.assertEqual((e["encoding"], e["qubits"], e["batch"], e["dtype"], e["bytes"]),
                         ("amplitude", 2, 1, "complex128", 64))
        self.assertEqual(e["label"], "cycle")
        self.assertEqual([s["device"] for s in e["shards"]], ["cpu:1"])
        self.assertGreater(e["expires_unix_ms"], e["created_unix_ms"])
        self.assertLessEqual(e["expires_unix_ms"] - e["created_unix_ms"], 600_000 + 1000)
        d = self.js("describe", e["ref"])
        self.assertEqual(d["handle"], handle)
        self.assertEqual(d["shards"], e["shards"])
        self.assertEqual((d["written"], d["writer_lease_id"], d["writer"], d["writer_pid"]),
                         (False, 0, "", 0))
        # Writable views need GPUs and a libqdp built with CUDA: refused by the daemon (4) or,
        # without CUDA here, by libqdp (1); nothing leased, nothing marked written.
        p = self.run_ctl("--json", "describe", "--views", "--writable", e["ref"])
        err = json.loads(p.stdout)["error"]
        self.assertIn((p.returncode, err["code"]), ((4, "QDP_ERR_FAILED_PRECONDITION"),
                                                    (1, "QDP_ERR_UNIMPLEMENTED")), p.stderr)
        d = self.js("describe", e["ref"])
        self.assertEqual((d["written"], d["leases"]), (False, 0))
        human = self.ok("describe", e["ref"]).stdout
        self.assertIn("REF        " + e["ref"], human)
        self.assertRegex(human, r"SHARD +DEVICE +RANK")
        listed = self.js("ls")["states"]
        self.assertIn(handle, [s["handle"] for s in listed])
        self.assertNotIn(token, json.dumps(listed))  # tokens are never listed
        table = self.ok("ls").stdout.splitlines()
        self.assertTrue(table[0].startswith("HANDLE"))
        self.assertTrue(any(line.startswith(handle) for line in table[1:]))
        # The columns line up: every row starts its ENCODING column where the header does.
        col = table[0].index("ENCODING")
        for line in table[1:]:
            self.assertEqual(line[col - 1], " ")
        out = os.path.join(self.dir, "cycle.npy")
        self.ok("fetch", e["ref"], "-o", out)
        np.testing.assert_allclose(np.load(out), [0.6, 0.8, 0, 0], atol=1e-15)
        r = self.js("rm", e["ref"])
        self.assertEqual(r["released"], [{"handle": handle, "freed_bytes": 64}])
        err = self.refused(5, "rm", e["ref"])
        self.assertEqual(err["code"], "QDP_ERR_NOT_FOUND")
        err = self.refused(5, "describe", e["ref"])
        self.assertEqual(err["code"], "QDP_ERR_NOT_FOUND")
        self.assertTrue(err["remote"])

    def test_server_refusals_exit_by_their_class_with_the_details(self):
        """The exit status is the refusal's class (qdpctl --help's table): 5 not found, 6
        invalid, 7 exhausted; the JSON error carries the status and its numbers."""
        e = self.refused(6, "encode", "--encoding", "amplitude", "--qubits", "0", "--values", "1")
        self.assertEqual(e["code"], "QDP_ERR_INVALID_ARGUMENT")
        self.assertEqual(e["status"], 3)
        self.assertEqual(e["field"], "qubits")
        e = self.refused(6, "encode", "--encoding", "amplitude", "--qubits", "2", "--values",
                         "0,0,0,0")
        self.assertEqual(e["code"], "QDP_ERR_INVALID_ARGUMENT")
        self.assertTrue(e["field"].startswith("input"), e)
        e = self.refused(6, "encode", "--encoding", "basis", "--qubits", "2", "--values", "nan")
        self.assertEqual(e["code"], "QDP_ERR_INVALID_ARGUMENT")
        # Infeasible: 2^40 amplitudes are 16 TiB.
        q = str(self.js("status")["max_qubits"])
        vals = ",".join(["0.5"] * int(q))
        e = self.refused(7, "encode", "--encoding", "phase", "--qubits", q, "--values", vals)
        self.assertEqual(e["code"], "QDP_ERR_RESOURCE_EXHAUSTED")
        self.assertGreater(e["need_bytes"], e["free_bytes"])
        self.assertEqual(e["need_bytes"], 16 << (int(q) - 2))  # a quarter on each of 4 devices
        self.assertIn(f"{q}-qubit complex128 state (16 TiB) does not fit", e["message"])
        p = self.run_ctl("encode", "--encoding", "phase", "--qubits", q, "--values", vals)
        self.assertEqual(p.returncode, 7)
        self.assertIn(f"need_bytes {e['need_bytes']}, free_bytes {e['free_bytes']}", p.stderr)
        e = self.refused(5, "describe", "00000000:11111111")
        self.assertEqual(e["code"], "QDP_ERR_NOT_FOUND")

    def test_plan_prints_the_per_device_arithmetic(self):
        before = self.js("status")
        x = os.path.join(self.dir, "plan.npy")
        np.save(x, np.ones(4096, np.float32))
        p = self.js("plan", "--encoding", "amplitude", "--qubits", "12", "--policy", "even",
                    "--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--input", x)
        self.assertTrue(p["feasible"])
        self.assertEqual(p["policy"], "even")
        self.assertEqual(p["global_bits"], 2)
        self.assertEqual(p["total_bytes"], 4096 * 16)
        self.assertEqual([n["device"] for n in p["needs"]], ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
        for n in p["needs"]:
            self.assertEqual(n["shard_bytes"], 1024 * 16)
            self.assertEqual(n["need_bytes"],
                             n["shard_bytes"] + n["staging_bytes"] + n["workspace_bytes"])
            self.assertTrue(n["fits"])
        self.assertEqual([s["count"] for s in p["shards"]], [1024] * 4)
        table = self.ok("plan", "--encoding", "phase", "--qubits", "3", "--values",
                        "0.1,0.2,0.3").stdout
        self.assertTrue(table.startswith("feasible"))
        self.assertRegex(table, r"DEVICE +RANK +SHARD +STAGING +WORKSPACE +NEED +BUDGET +FITS")
        q = str(self.js("status")["max_qubits"])
        p = self.js("plan", "--encoding", "phase", "--qubits", q, "--values",
                    ",".join(["0.5"] * int(q)))
        self.assertFalse(p["feasible"])
        self.assertTrue(p["message"])
        # A dry run allocates nothing.
        after = self.js("status")
        self.assertEqual((after["states"], after["used_bytes"]),
                         (before["states"], before["used_bytes"]))

    def test_plan_describes_a_streamed_input_by_its_shape(self):
        # A dry run must not need the data: a local file above the inline limit (2 MiB here) and
        # a bare shape are planned from dtype, rows and cols alone, as EncodeUpload's first
        # message declares them.
        big = os.path.join(self.dir, "plan-big.npy")
        np.save(big, np.ones(1 << 18, np.float64))
        p = self.js("plan", "--encoding", "amplitude", "--qubits", "18", "--input", big)
        self.assertTrue(p["feasible"])
        self.assertEqual(p["total_bytes"], (1 << 18) * 16)
        p = self.js("plan", "--encoding", "amplitude", "--qubits", "20", "--rows", "3", "--cols",
                    str(1 << 20), "--input-dtype", "float32", "--dtype", "complex64")
        self.assertEqual(p["total_bytes"], 3 * (1 << 20) * 8)

    # ---- inputs ----

    def check_fetch(self, ref, want, dtype="complex128"):
        out = os.path.join(self.dir, "check.npy")
        self.ok("fetch", ref, "-o", out, "--force")
        qdpref.assert_close(np.load(out).reshape(want.shape), want, dtype, ref)

    def test_local_npy_inline_and_streamed_and_raw(self):
        # 16 KiB: inline.
        small = self.rng.normal(size=(2, 1024))
        path = os.path.join(self.dir, "small.npy")
        np.save(path, small)
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "10", "--input", path)
        self.assertEqual(e["batch"], 2)
        self.check_fetch(e["ref"], qdpref.batch("amplitude", small, 10))
        self.ok("rm", e["ref"])
        # 2 MiB of float32 (> 1 MiB): streamed in chunks, with a forced progress bar.
        big = self.rng.normal(size=1 << 19).astype(np.float32)
        path = os.path.join(self.dir, "big.npy")
        np.save(path, big)
        p = self.ok("--json", "--progress", "encode", "--encoding", "amplitude", "--qubits", "19",
                    "--input", path, "--dtype", "complex64", "--chunk-bytes", "65536")
        self.assertIn("100.0%", p.stderr)
        e = json.loads(p.stdout)
        self.check_fetch(e["ref"], qdpref.amplitude(big.astype(np.float64), 19), "complex64")
        self.ok("rm", e["ref"])
        # --upload forces a stream for a small file too.
        angles = os.path.join(self.dir, "angles.npy")
        np.save(angles, np.array([0.1, 0.2, 0.3]))
        e = self.js("encode", "--encoding", "angle", "--qubits", "3", "--input", angles,
                    "--upload", "--chunk-bytes", "8")
        self.check_fetch(e["ref"], qdpref.angle([0.1, 0.2, 0.3], 3))
        self.ok("rm", e["ref"])
        # Raw float32 with a shape from the command line.
        raw = os.path.join(self.dir, "raw.f32")
        vals = np.arange(1, 17, dtype=np.float32)
        vals.tofile(raw)
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "3", "--input", raw,
                    "--input-dtype", "float32", "--rows", "2")
        self.assertEqual(e["batch"], 2)
        self.check_fetch(e["ref"], np.stack([qdpref.amplitude(vals[:8], 3),
                                             qdpref.amplitude(vals[8:], 3)]))
        self.ok("rm", e["ref"])
        # Problems found here exit by their class, as the daemon's would: a file that is not
        # there is not found (5), raw values of no given type an invalid argument (6).
        err = self.refused(5, "encode", "--encoding", "amplitude", "--qubits", "3", "--input",
                           os.path.join(self.dir, "missing.npy"))
        self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_NOT_FOUND", False))
        err = self.refused(6, "encode", "--encoding", "amplitude", "--qubits", "3", "--input",
                           raw)  # raw without --input-dtype
        self.assertEqual((err["field"], err["remote"]), ("input.dtype", False))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", newline="") as f:
            f.write(text)
        return path

    def test_csv_input_is_one_sample_per_row_as_numpy_reads_it(self):
        """The reported file (two rows of two numbers) is a batch of two samples, with or without
        --input-dtype float64 and whatever its name; NumPy's own parser gives the reference."""
        for name in ("data.csv", "data.txt"):
            path = self.write(name, "0.1,0.2\n0.3,0.4\n")
            want = qdpref.batch("amplitude", np.loadtxt(path, delimiter=","), 1)
            for dtype in (("--input-dtype", "float64"), ()):  # the reported command first
                e = self.js("encode", "--encoding", "amplitude", "--qubits", "1", "--input", path,
                            *dtype)
                self.assertEqual(e["batch"], 2)
                self.check_fetch(e["ref"], want)
                self.ok("rm", e["ref"])
        # A header; its column of text left out; quoted fields, CRLF, blank lines; float32 values
        # for a complex64 state.
        path = self.write("feat.csv", 'id,"x",y,z\r\nA,0.1,0.2,0.3\r\n\r\nB,"1.5",-0.5,2e-1\r\n')
        with open(path, newline="") as f:
            rows = [r for r in csv.reader(f) if r]
        x = np.array([[float(v) for v in r[1:]] for r in rows[1:]])
        e = self.js("encode", "--encoding", "angle", "--qubits", "3", "--input", path,
                    "--input-dtype", "float32", "--dtype", "complex64")
        self.assertEqual(e["batch"], 2)
        self.check_fetch(e["ref"], qdpref.batch("angle", x.astype(np.float32), 3), "complex64")
        self.ok("rm", e["ref"])
        # Basis: one index per row.
        path = self.write("idx.csv", "index\n5\n0\n2\n")
        e = self.js("encode", "--encoding", "basis", "--qubits", "3", "--input", path,
                    "--input-dtype", "int64")
        self.check_fetch(e["ref"], qdpref.batch("basis", [5, 0, 2], 3))
        self.ok("rm", e["ref"])
        # Above 1 MiB of values: uploaded from the parsed values, in chunks.
        big = self.rng.uniform(-1, 1, size=(1 << 16, 4))
        path = os.path.join(self.dir, "big.csv")
        np.savetxt(path, big, delimiter=",", fmt="%.17g")
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "2", "--input", path,
                    "--chunk-bytes", "65536")
        self.assertEqual(e["batch"], 1 << 16)
        self.check_fetch(e["ref"], qdpref.batch("amplitude", big, 2))
        self.ok("rm", e["ref"])

    def test_a_text_file_is_never_read_as_raw_bytes_unless_asked(self):
        """Before, a text file with --input-dtype was encoded from its bytes and exited 0; now
        one that is not CSV exits 6 (invalid argument) with what to do, and --raw still reads
        the bytes as values when that is what they are."""
        text = "Dear reader,\nthese are my notes, not numbers.\n\n\n"
        self.assertEqual(len(text) % 8, 0)  # a whole number of float64 values
        path = self.write("notes.txt", text)
        p = self.run_ctl("--json", "encode", "--encoding", "amplitude", "--qubits", "3",
                         "--input", path, "--input-dtype", "float64")
        self.assertEqual(p.returncode, 6, p.stderr)
        e = json.loads(p.stdout)["error"]
        self.assertEqual((e["code"], e["field"], e["remote"]),
                         ("QDP_ERR_INVALID_ARGUMENT", "input.raw", False))
        self.assertIn("notes.txt", e["message"])
        self.assertIn("numpy.save", e["message"])
        self.assertIn("pass --raw", p.stderr)
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "3", "--input", path,
                    "--input-dtype", "float64", "--raw")
        x = np.fromfile(path, np.float64)
        x = x / np.max(np.abs(x))  # text as doubles spans hundreds of binary orders
        self.check_fetch(e["ref"], qdpref.amplitude(x, 3))
        self.ok("rm", e["ref"])
        # A CSV with a hole names it; --raw wants a type; a binary file stays raw as before.
        path = self.write("hole.csv", "x,y\n1,2\n3,\n")
        e = self.refused(6, "encode", "--encoding", "amplitude", "--qubits", "1", "--input", path)
        self.assertIn("Row 1 (line 3), column 1 ('y')", e["message"])
        self.assertIn("is empty", e["message"])
        self.refused(2, "encode", "--encoding", "amplitude", "--qubits", "1", "--input", path,
                     "--raw")
        raw = os.path.join(self.dir, "vals.f64")
        np.array([3.0, 4.0]).tofile(raw)
        e = self.js("encode", "--encoding", "amplitude", "--qubits", "1", "--input", raw,
                    "--input-dtype", "float64")
        self.check_fetch(e["ref"], qdpref.amplitude([3.0, 4.0], 1))
        self.ok("rm", e["ref"])

    def test_help_completion_and_manual_name_raw(self):
        self.assertIn("--raw", self.ok("encode", "--help").stdout)
        comp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                            "qdpctl", "qdpctl.bash")
        got = subprocess.run(
            ["bash", "-c", '. "$1"; COMP_WORDS=("$2" encode --input x.csv --ra); COMP_CWORD=4; '
             '_qdpctl; echo "${COMPREPLY[*]}"', "_", comp, self.exe],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(got.stdout.strip(), "--raw", got.stderr)

    def test_every_exit_class_through_the_real_binary(self):
        """qdpctl --help's table, one failure of each class (and both sides of the line for the
        classes libqdp finds locally too: a bad input file is 6, a missing one 5, wherever it
        was found)."""
        d = self.dir
        vals = ("--encoding", "phase", "--qubits", "1", "--values", "0.5")
        self.ok("status")  # 0
        e = self.js("encode", *vals)
        out = os.path.join(d, "exists.npy")
        self.write("exists.npy", "x")
        err = self.refused(1, "fetch", e["ref"], "-o", out)  # local, no class of its own
        self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_ALREADY_EXISTS", False))
        self.assertEqual(self.run_ctl("encode", *vals, "--frobnicate").returncode, 2)
        self.assertEqual(self.run_ctl("describe", "no-colon").returncode, 2)  # REF syntax
        # 3: gRPC's finding, and libqdp's when the descriptor of a file on the node finds no
        # daemon to take it.
        nobody = "unix:" + os.path.join(d, "nobody.sock")
        err = self.refused(3, "--target", nobody, "status")
        self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_UNAVAILABLE", True))
        npy = os.path.join(d, "class.npy")
        np.save(npy, np.ones(2))
        err = self.refused(3, "--target", nobody, "encode", *vals[:4], "--server-file", npy)
        self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_UNAVAILABLE", False))
        err = self.refused(4, "encode", *vals, "--ipc")  # views on host memory
        self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_FAILED_PRECONDITION", True))
        # 5: qdpd's (an unknown state) and local ones (a file, a shared-memory object).
        err = self.refused(5, "describe", "00000000:11111111")
        self.assertTrue(err["remote"])
        for args in (("encode", *vals[:4], "--input", os.path.join(d, "none.npy")),
                     ("encode", *vals[:4], "--server-file", os.path.join(d, "none.npy")),
                     ("region", "add", "/qdp-no-such-object")):
            err = self.refused(5, *args)
            self.assertEqual((err["code"], err["remote"]), ("QDP_ERR_NOT_FOUND", False), args)
        # 6: qdpd's, and libqdp's (a raw file of no type, a broken .npy, a text file that is not
        # CSV, a token too long to send).
        err = self.refused(6, "encode", "--encoding", "phase", "--qubits", "0", "--values", "1")
        self.assertTrue(err["remote"])
        raw = os.path.join(d, "class.f64")
        np.array([1.0, 2.0]).tofile(raw)
        broken = os.path.join(d, "broken.npy")
        with open(broken, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'}")
        notes = self.write("class.txt", "just, words\nand more\n")
        for args, field in ((("encode", *vals[:4], "--input", raw), "input.dtype"),
                            (("encode", *vals[:4], "--input", broken), "npy"),
                            (("plan", *vals[:4], "--input", notes), "input.raw"),
                            (("--token", "t" * 2000, "status"), "token")):
            err = self.refused(6, *args)
            self.assertEqual((err["code"], err["field"], err["remote"]),
                             ("QDP_ERR_INVALID_ARGUMENT", field, False), args)
        q = str(self.js("status")["max_qubits"])
        err = self.refused(7, "encode", "--encoding", "phase", "--qubits", q, "--values",
                           ",".join(["0.5"] * int(q)))
        self.assertEqual(err["code"], "QDP_ERR_RESOURCE_EXHAUSTED")
        # 8: a descriptor handed over that is not open for reading.
        x = np.arange(1, 9, dtype=np.float64)
        fd = os.open(os.path.join(d, "write-only.bin"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, x.tobytes())
            p = subprocess.run([self.exe, "--json", "encode", *vals[:4], "--shm-fd", str(fd),
                                "--offset", "0", "--length", str(x.nbytes), "--input-dtype",
                                "float64"], capture_output=True, text=True, pass_fds=(fd,),
                               timeout=60)
        finally:
            os.close(fd)
        self.assertEqual(p.returncode, 8, p.stderr)
        self.assertEqual(json.loads(p.stdout)["error"]["code"], "QDP_ERR_PERMISSION_DENIED")
        # 9: a registered region cut under the encode that reads it.
        name = f"/qdp-ctl-class-{os.getpid()}"
        with open("/dev/shm" + name, "wb") as f:
            f.write(x.tobytes())
        try:
            reg = self.js("region", "add", name)["ref"]
            os.truncate("/dev/shm" + name, 0)
            err = self.refused(9, "encode", "--encoding", "amplitude", "--qubits", "3",
                               "--region", reg, "--offset", "0", "--length", str(x.nbytes),
                               "--input-dtype", "float64")
            self.assertEqual(err["code"], "QDP_ERR_DATA_LOSS")
            self.ok("region", "rm", reg)
        finally:
            os.unlink("/dev/shm" + name)
        self.ok("rm", e["ref"])

    def test_ctrl_c_exits_130_at_once_and_leaves_no_state(self):
        """Before, Ctrl-C during an encode waited for it and exited 0 with the state made; now
        qdpctl exits 130 at once (JSON too) and qdpd, its caller gone, commits nothing."""
        before = {s["handle"] for s in self.js("ls")["states"]}
        used = self.js("status")["used_bytes"]
        n = 25  # 0.8 s on a 2-core VM, 512 MiB
        values = ",".join(["0.1"] * (n + n * (n - 1) // 2))
        p = subprocess.Popen([self.exe, "--json", "--progress", "encode", "--encoding", "iqp",
                              "--qubits", str(n), "--values", values],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        while "encoding on the daemon" not in seen:  # the call is in flight
            ch = p.stderr.read(1)
            self.assertTrue(ch, f"qdpctl ended first: {seen}")
            seen += ch
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertEqual(json.loads(out)["error"]["code"], "INTERRUPTED")
        deadline = time.monotonic() + 30
        while {s["handle"] for s in self.js("ls")["states"]} - before:
            self.assertLess(time.monotonic(), deadline, "the interrupted encode left a state")
            time.sleep(0.2)
        # Nor its reservation: the job sees its caller gone when its encode ends, and gives back
        # what it took (later tests compare the daemon's bytes in use before and after).
        while self.js("status")["used_bytes"] != used:
            self.assertLess(time.monotonic(), deadline, "the interrupted encode kept its bytes")
            time.sleep(0.2)

    def test_basis_vector_from_npy_is_one_index_per_sample(self):
        path = os.path.join(self.dir, "idx.npy")
        np.save(path, np.array([1, 6, 3], np.int64))
        e = self.js("encode", "--encoding", "basis", "--qubits", "3", "--input", path)
        self.assertEqual(e["batch"], 3)
        want = np.zeros((3, 8))
        want[[0, 1, 2], [1, 6, 3]] = 1
        self.check_fetch(e["ref"], want)
        self.ok("rm", e["ref"])

    def test_shared_memory_input(self):
        x = self.rng.normal(size=256)
        shm = shared_memory.SharedMemory(create=True, size=x.nbytes + 128)
        try:
            shm.buf[128:128 + x.nbytes] = x.tobytes()
            e = self.js("encode", "--encoding", "amplitude", "--qubits", "8", "--shm",
                        "/" + shm.name, "--offset", "128", "--length", str(x.nbytes),
                        "--input-dtype", "float64", "--cols", "256")
            self.check_fetch(e["ref"], qdpref.amplitude(x, 8))
            self.ok("rm", e["ref"])
        finally:
            shm.close()
            shm.unlink()

    def test_fetch_refuses_to_overwrite_without_force(self):
        e = self.js("encode", "--encoding", "phase", "--qubits", "2", "--values", "0.1,0.2")
        out = os.path.join(self.dir, "keep.npy")
        with open(out, "wb") as f:
            f.write(b"precious")
        err = self.refused(1, "fetch", e["ref"], "-o", out)
        self.assertEqual(err["code"], "QDP_ERR_ALREADY_EXISTS")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"precious")
        self.ok("fetch", e["ref"], "-o", out, "--force")
        self.assertEqual(np.load(out).shape, (4,))
        # No partial files are left beside it.
        self.assertEqual([f for f in os.listdir(self.dir) if ".part-" in f], [])
        self.ok("rm", e["ref"])

    def test_kernel_writes_the_matrix_of_resident_states(self):
        X = self.rng.uniform(-1, 1, size=(5, 8))
        Y = self.rng.uniform(-1, 1, size=(3, 8))
        refs = []
        for M in (X, Y):
            path = os.path.join(self.dir, f"k{len(refs)}.npy")
            np.save(path, M)
            refs.append(self.js("encode", "--encoding", "amplitude", "--qubits", "3", "--input",
                                path)["ref"])
        P = np.array([qdpref.amplitude(x, 3) for x in X])
        Q = np.array([qdpref.amplitude(y, 3) for y in Y])
        out = os.path.join(self.dir, "K.npy")
        k = self.js("kernel", refs[0], "-o", out)
        self.assertEqual((k["rows"], k["cols"], k["dtype"]), (5, 5, "float64"))
        K = np.load(out)
        np.testing.assert_allclose(K, np.abs(P.conj() @ P.T) ** 2, rtol=0, atol=1e-14)
        np.testing.assert_array_equal(K, K.T)
        self.ok("kernel", refs[0], refs[1], "-o", out, "--overlaps", "--force")
        np.testing.assert_allclose(np.load(out), P.conj() @ Q.T, rtol=0, atol=1e-14)
        err = self.refused(1, "kernel", refs[0], refs[1], "-o", out)
        self.assertEqual(err["code"], "QDP_ERR_ALREADY_EXISTS")
        self.refused(2, "kernel", refs[0])  # no -o: a usage error, before connecting
        for ref in refs:
            self.ok("rm", ref)

    def test_kernel_of_inputs_writes_the_matrix_in_tiles(self):
        """The form from inputs against the direct sum over reference states: angle X (9 x 4,
        .npy) by Y (4 x 4, .npy) in blocks of 4 amplitudes (--max-bytes 2000: the operands of
        the 9 rows' blocks and their encode, 9 * 4 * 32 B) and in one; amplitude values with
        themselves as complex64 overlaps; an --input past 1 MiB (through shared memory) with
        itself. No state is kept."""
        before = self.js("status")["states"]
        X = self.rng.uniform(-1, 1, size=(9, 4))
        Y = self.rng.uniform(-1, 1, size=(4, 4))
        xp, yp = (os.path.join(self.dir, f"kin{i}.npy") for i in range(2))
        np.save(xp, X)
        np.save(yp, Y)
        P, Q = qdpref.batch("angle", X, 4), qdpref.batch("angle", Y, 4)
        out = os.path.join(self.dir, "Kin.npy")
        for mb in ("2000", "0"):
            k = self.js("kernel", "--encoding", "angle", "--qubits", "4", "--input", xp,
                        "--input-b", yp, "--max-bytes", mb, "-o", out, "--force")
            self.assertEqual((k["rows"], k["cols"], k["dtype"]), (9, 4, "float64"))
            np.testing.assert_allclose(np.load(out), np.abs(P.conj() @ Q.T) ** 2, rtol=0,
                                       atol=1e-14)
        A = self.rng.uniform(-1, 1, size=(5, 13))
        self.ok("kernel", "--encoding", "amplitude", "--qubits", "4", "--rows", "5", "--values",
                ",".join(repr(v) for v in A.ravel()), "--dtype", "complex64", "--overlaps",
                "-o", out, "--force")
        O = np.load(out)
        R = qdpref.batch("amplitude", A, 4)
        self.assertEqual(O.dtype, np.complex64)
        np.testing.assert_allclose(O, R.conj() @ R.T, rtol=0, atol=1e-6)
        B = self.rng.uniform(-1, 1, size=(1100, 128))  # 1.07 MiB of float64
        np.save(xp, B)
        self.ok("kernel", "--encoding", "amplitude", "--qubits", "7", "--input", xp, "-o", out,
                "--force")
        S = qdpref.batch("amplitude", B, 7)
        np.testing.assert_allclose(np.load(out), np.abs(S.conj() @ S.T) ** 2, rtol=0, atol=1e-14)
        self.assertEqual(self.js("status")["states"], before)

    def test_kernel_of_inputs_refusals(self):
        """Usage errors before connecting (REFs with an input, no encoding, no input, a bad
        --max-bytes, an option of encode's that kernel has no use for), and qdpd's refusals with
        their fields: max_bytes too small (need_bytes: 2 * 256 + 2 * 16 * 8 for rows of 4 qubits
        and their real parts), another policy."""
        xp = os.path.join(self.dir, "kref.npy")
        np.save(xp, self.rng.uniform(-1, 1, size=(5, 16)))
        out = os.path.join(self.dir, "Kref.npy")
        req = ("--encoding", "amplitude", "--qubits", "4")
        env = {"QDP_SOCKET": os.path.join(self.dir, "nobody.sock"), "QDP_TARGET": ""}
        for args in ((*req, "--input", xp, "a:b", "-o", out),
                     ("--qubits", "4", "--input", xp, "-o", out),
                     (*req, "-o", out),
                     (*req, "--input", xp, "--max-bytes", "1x", "-o", out),
                     (*req, "--input", xp, "--ttl", "5", "-o", out),
                     (*req, "--input", xp)):
            p = self.run_ctl("kernel", *args, env=env)
            self.assertEqual(p.returncode, 2, f"qdpctl kernel {' '.join(args)}: {p.stderr}")
        p = self.run_ctl("kernel", *req, "--input", xp, "a:b", "-o", out, env=env)
        self.assertIn("not both", p.stderr)
        err = self.refused(6, "kernel", *req, "--input", xp, "--max-bytes", "100", "-o", out)
        self.assertEqual((err["field"], err["need_bytes"]), ("max_bytes", 2 * 256 + 2 * 16 * 8))
        err = self.refused(6, "kernel", *req, "--input", xp, "--policy", "even", "-o", out)
        self.assertEqual(err["field"], "encode.placement.policy")
        self.assertFalse(os.path.exists(out))

    def test_kernel_help_completion_and_manual_name_the_form_from_inputs(self):
        h = self.ok("kernel", "--help").stdout
        for opt in ("--input-b", "--max-bytes", "--encoding", "--qubits", "--values", "--region",
                    "qdpctl kernel --encoding angle"):
            self.assertIn(opt, h)
        here = os.path.dirname(os.path.abspath(__file__))
        comp = os.path.join(here, "..", "..", "client", "qdpctl", "qdpctl.bash")
        prefix = os.path.join(self.dir, "kcomp")
        open(prefix + ".npy", "wb").close()
        for words, want in ((["kernel", "--max-b"], "--max-bytes"),
                            (["kernel", "--input-b", prefix], prefix + ".npy")):
            got = subprocess.run(
                ["bash", "-c", '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
                 '_qdpctl; echo "${COMPREPLY[*]}"', "_", comp, self.exe, *words],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(got.stdout.strip(), want, got.stderr)
        with open(os.path.join(here, "..", "..", "docs", "man", "qdpctl.1")) as f:
            man = f.read()
        for opt in (r"\-\-input\-b", r"\-\-max\-bytes"):
            self.assertIn(opt, man)

    def test_measure_prints_probabilities_and_expectations(self):
        e = self.js("encode", "--encoding", "angle", "--qubits", "2", "--values", "0.3,1.1")
        m = self.js("measure", e["ref"], "--qubits", "0")
        self.assertEqual((m["rows"], m["cols"]), (1, 2))
        np.testing.assert_allclose(m["values"][0], [np.cos(0.3) ** 2, np.sin(0.3) ** 2],
                                   atol=1e-15)
        p = self.ok("measure", e["ref"], "--pauli", "ZI", "--pauli", "IZ")
        np.testing.assert_allclose([float(v) for v in p.stdout.split()], np.cos([0.6, 2.2]),
                                   atol=1e-15)
        d = self.js("measure", e["ref"], "--shots", "50", "--seed", "4")
        self.assertEqual((d["rows"], d["cols"]), (1, 50))
        self.assertTrue(all(0 <= v < 4 for v in d["values"][0]))
        again = self.js("measure", e["ref"], "--shots", "50", "--seed", "4")
        self.assertEqual(d["values"], again["values"])
        self.refused(2, "measure", e["ref"])  # none of --qubits, --pauli and --shots
        self.refused(2, "measure", e["ref"], "--seed", "4")  # a seed without shots
        err = self.refused(6, "measure", e["ref"], "--pauli", "ZZZ")
        self.assertEqual(err["code"], "QDP_ERR_INVALID_ARGUMENT")
        self.ok("rm", e["ref"])


if __name__ == "__main__":
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
