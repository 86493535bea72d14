"""Integration: qdpd's Prometheus listener (metrics_listen) against a real daemon — the text
parsed strictly, counters and histograms moved by jobs made here (by hand-computed amounts),
gauges against the daemon's own answers, the HTTP paths and methods, and readiness through a
SIGTERM drain.

Run by with_qdpd.sh (QDP_TARGET, QDPD_LOG, QDPD_PID set) with `--metrics-listen 127.0.0.1:0`.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc
import numpy as np

import qdpc

SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"(,|$)')


def metrics_url():
    with open(os.environ["QDPD_LOG"]) as f:
        m = re.search(r"serving metrics on (http://\S+/metrics)", f.read())
    assert m, "qdpd did not say where it serves metrics"
    return m.group(1)


def get(url, method="GET"):
    req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def parse(text):
    """{(name, frozenset(labels)): value}, checking every line's grammar, each family's TYPE
    before its samples and every name's qdp_ prefix."""
    out, typed = {}, {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            typed[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"line {n} is not a sample: {line!r}"
        name, _, labels, value = m.groups()
        assert name.startswith("qdp_"), f"line {n}: {name} has no qdp_ prefix"
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
        assert family in typed, f"line {n}: {name} comes before its TYPE"
        kv = []
        rest = labels or ""
        while rest:
            lm = LABEL.match(rest)
            assert lm, f"line {n}: bad labels {labels!r}"
            kv.append((lm.group(1), lm.group(2)))
            rest = rest[lm.end():]
        key = (name, frozenset(kv))
        assert key not in out, f"line {n}: {name}{labels} twice"
        out[key] = float("inf") if value == "+Inf" else float(value)
    return out, typed


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.url = metrics_url()
        cls.base = cls.url[:-len("/metrics")]
        cls.c = qdpc.Client()

    def scrape(self):
        status, headers, body = get(self.url)
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        return parse(body)

    def test_a_sharded_state_counts_its_collective_phase(self):
        """Amplitude over 4 devices reduces its norm across them: its job observes a collective
        phase. Iqp over 4 transforms its top bits on each shard with no exchange, and a state on
        one device has nothing between shards: neither does."""
        before, typed = self.scrape()
        made = [self.c.encode("amplitude", 6, values=np.arange(1.0, 65.0), policy="even"),
                self.c.encode("iqp", 6, values=np.full(21, 0.2), policy="even"),
                self.c.encode("amplitude", 6, values=np.arange(1.0, 65.0), policy="single")]
        self.assertEqual([len(s.shards) for s in made], [4, 4, 1])
        after, _ = self.scrape()
        moved = {k: val(after, "qdp_job_phase_seconds_" + k, phase="collective")
                 - val(before, "qdp_job_phase_seconds_" + k, phase="collective")
                 for k in ("count", "sum")}
        self.assertEqual(moved["count"], 1)
        self.assertEqual([s.collective for s in made], ["host", "none", "none"])
        self.assertGreater(moved["sum"], 0)
        # Nothing here holds a view or an upload.
        for gauge in ("qdp_leases", "qdp_uploads"):
            self.assertEqual(typed[gauge], "gauge")
            self.assertEqual(val(after, gauge), 0, gauge)
        for s in made:
            self.c.release(s)

    def test_jobs_move_the_counters_by_what_they_did(self):
        before, typed = self.scrape()
        self.assertEqual(typed["qdp_jobs_total"], "counter")
        self.assertEqual(typed["qdp_job_duration_seconds"], "histogram")
        states = []
        for k in range(5):
            states.append(self.c.encode("angle", 3, values=np.full(3, 0.1 * k)))
        with self.assertRaises(Exception):
            self.c.encode("angle", 3, values=np.zeros(2))  # 2 angles for 3 qubits
        after, _ = self.scrape()

        def moved(name, **labels):
            return val(after, name, **labels) - val(before, name, **labels)

        self.assertEqual(moved("qdp_jobs_total", encoding="angle", code="OK"), 5)
        self.assertEqual(moved("qdp_jobs_total", encoding="angle", code="INVALID_ARGUMENT"), 1)
        self.assertEqual(moved("qdp_rpcs_total", method="Encode", code="OK"), 5)
        self.assertEqual(moved("qdp_input_bytes_total", source="values"), 5 * 3 * 8)
        self.assertEqual(moved("qdp_output_bytes_total", sink="state"), 5 * 8 * 16)
        self.assertEqual(moved("qdp_job_duration_seconds_count", encoding="angle"), 6)
        self.assertEqual(moved("qdp_job_encode_seconds_count", encoding="angle"), 5)
        for phase in ("ingest", "plan", "encode", "commit"):  # successful jobs only
            self.assertEqual(moved("qdp_job_phase_seconds_count", phase=phase), 5, phase)
        self.assertGreater(moved("qdp_job_phase_seconds_sum", phase="encode"), 0)
        self.assertGreater(moved("qdp_job_duration_seconds_sum", encoding="angle"), 0)
        # Buckets cumulative, the last one the count.
        les = sorted((float(dict(k[1])["le"]), v) for k, v in after.items()
                     if k[0] == "qdp_job_duration_seconds_bucket"
                     and dict(k[1])["encoding"] == "angle")
        counts = [v for _, v in les]
        self.assertEqual(counts, sorted(counts))
        self.assertEqual(les[-1], (float("inf"),
                                   val(after, "qdp_job_duration_seconds_count",
                                       encoding="angle")))
        self.assertEqual(moved("qdp_job_phase_seconds_count", phase="collective"), 0)  # 1 device
        self.assertEqual(val(after, "qdp_states"), self.c.status().states)
        for s in states:
            self.c.release(s)
        self.assertEqual(val(self.scrape()[0], "qdp_states"), val(after, "qdp_states") - 5)

    def test_gauges_agree_with_status(self):
        st = self.c.status()
        got, _ = self.scrape()
        self.assertEqual(val(got, "qdp_up"), 1)
        self.assertEqual(val(got, "qdp_build_info", version=st.version, backend=st.backend,
                             transport="local"), 1)
        self.assertEqual(val(got, "qdp_rank_up", rank="0"), 1)
        self.assertEqual(len(st.devices), 4)
        for d in st.devices:
            self.assertEqual(val(got, "qdp_device_memory_budget_bytes", device=d.name, rank="0"),
                             d.budget_bytes)
            self.assertEqual(val(got, "qdp_device_memory_total_bytes", device=d.name, rank="0"),
                             d.total_bytes)

    def test_paths_and_methods(self):
        self.assertEqual(get(self.base + "/healthz")[0], 200)
        self.assertEqual(get(self.base + "/readyz")[0], 200)
        self.assertEqual(get(self.base + "/states")[0], 404)
        status, headers, _ = get(self.url, method="POST")
        self.assertEqual(status, 405)
        self.assertEqual(headers["Allow"], "GET, HEAD")

    def top(self, *args):
        p = subprocess.run([os.environ["QDPCTL"], *args], capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_qdpctl_top_shows_the_daemon_from_its_metrics(self):
        st = self.c.status()
        rc, out, err = self.top("--json", "top", "--once", "--interval", "0.5", "--metrics",
                                self.url)
        self.assertEqual(rc, 0, err)
        idle = json.loads(out)
        self.assertEqual(idle["schema"], 1)
        self.assertEqual((idle["jobs_per_s"], idle["job_p50_s"]), (0, None))  # nothing ran
        self.assertEqual(idle["states"], st.states)
        self.assertEqual({d["device"]: d["budget_bytes"] for d in idle["devices"]},
                         {d.name: d.budget_bytes for d in st.devices})
        stop = threading.Event()

        def work():
            while not stop.is_set():
                self.c.release(self.c.encode("angle", 3, values=np.full(3, 0.2)))

        t = threading.Thread(target=work)
        t.start()
        try:
            rc, out, err = self.top("--json", "top", "--once", "--interval", "1", "--metrics",
                                    self.url[len("http://"):-len("/metrics")])  # HOST:PORT
        finally:
            stop.set()
            t.join()
        self.assertEqual(rc, 0, err)
        busy = json.loads(out)
        self.assertGreater(busy["jobs_per_s"], 0)
        self.assertTrue(0 < busy["job_p50_s"] <= busy["job_p99_s"] < 10, busy)
        rc, out, err = self.top("top", "--once", "--interval", "0.5", "--metrics", self.url)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"jobs [\d.]+/s, failed [\d.]+/s")
        for d in st.devices:
            self.assertRegex(out, rf"\n{re.escape(d.name)}\s")
        self.assertEqual(self.top("--json", "top")[0], 2)  # JSON is one frame: --once
        rc, _, err = self.top("top", "--once", "--metrics", "127.0.0.1:1")
        self.assertEqual(rc, 3)
        self.assertIn("metrics_listen", err)

    def test_zz_not_ready_while_draining(self):
        """Last (zz): SIGTERM with an upload in flight; while the daemon drains, /readyz is 503
        and qdp_up 0; then the upload ends and the daemon exits (the harness checks it exited
        0)."""
        go = threading.Event()
        req = self.c.request("angle", 2, input_dtype="float64", rows=1, cols=2)
        done = []

        def chunks():
            first = self.c.pb.UploadChunk()
            first.request.CopyFrom(req)
            yield first
            yield self.c.pb.UploadChunk(data=np.zeros(1).tobytes())  # half the values
            go.wait(30)
            yield self.c.pb.UploadChunk(data=np.zeros(1).tobytes(), last=True)

        def upload():
            try:
                done.append(self.c._EncodeUpload(chunks(), timeout=60, metadata=self.c.metadata))
            except Exception as e:  # the drain may cancel it; either way it ends
                done.append(e)

        t = threading.Thread(target=upload)
        t.start()
        # grpc.health.v1 Watch: SERVING (08 01) now; an unknown service SERVICE_UNKNOWN (08 03).
        watch = self.c.channel.unary_stream("/grpc.health.v1.Health/Watch",
                                            request_serializer=None, response_deserializer=None)
        stream = watch(b"", timeout=30)
        self.assertEqual(next(stream), b"\x08\x01")
        other = watch(b"\x0a\x04nope", timeout=30)  # service "nope"
        self.assertEqual(next(other), b"\x08\x03")
        other.cancel()
        deadline = time.monotonic() + 10
        while val(self.scrape()[0], "qdp_upload_bytes") == 0:
            self.assertLess(time.monotonic(), deadline, "the upload never started")
            time.sleep(0.05)
        os.kill(int(os.environ["QDPD_PID"]), signal.SIGTERM)
        deadline = time.monotonic() + 10
        while get(self.base + "/readyz")[0] != 503:
            self.assertLess(time.monotonic(), deadline, "/readyz stayed 200 after SIGTERM")
            time.sleep(0.05)
        self.assertEqual(val(self.scrape()[0], "qdp_up"), 0)
        self.assertEqual(get(self.base + "/healthz")[0], 200)  # alive, only not ready
        # The watcher hears NOT_SERVING (08 02), and its stream ends OK: no waiting for it.
        self.assertEqual(list(stream), [b"\x08\x02"])
        self.assertEqual(stream.code(), grpc.StatusCode.OK)
        go.set()
        t.join(30)
        self.assertTrue(done)
        # The daemon finishes its drain and exits; the harness's own SIGTERM must not land in
        # its last moments (signals back to their defaults), so wait until it is gone.
        pid = int(os.environ["QDPD_PID"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(")")[-1].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            self.fail("qdpd did not exit within 60 s of the drain")


if __name__ == "__main__":
    import sys
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
