"""Integration: Debian's Prometheus scraping a real qdpd — jobs made here seen through
Prometheus's HTTP API, a histogram quantile computed from qdpd's buckets, the alert rules loaded
and unit-tested by promtool, and every query of the Grafana dashboard evaluated.

Run by with_qdpd.sh (QDP_TARGET, QDPD_LOG, QDP_TEST_DIR set) with
`--metrics-listen 127.0.0.1:0`. Exits 77 (a skip) where prometheus or promtool is missing.
"""

import json
import math
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

import numpy as np

import qdpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "qdp.json"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


class Prometheus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.environ["QDPD_LOG"]) as f:
            m = re.search(r"serving metrics on http://([^/\s]+)/metrics", f.read())
        assert m, "qdpd did not say where it serves metrics"
        d = pathlib.Path(os.environ["QDP_TEST_DIR"])
        cls.api = f"http://127.0.0.1:{free_port()}"
        conf = d / "prometheus.yml"
        conf.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: [{json.dumps(str(RULES))}]\n"
            "scrape_configs:\n"
            f"  - {{job_name: qdp, static_configs: [{{targets: [\"{m.group(1)}\"]}}]}}\n")
        cls.log = open(d / "prometheus.log", "w")
        cls.proc = subprocess.Popen(
            ["prometheus", f"--config.file={conf}", f"--storage.tsdb.path={d / 'tsdb'}",
             f"--web.listen-address={cls.api[len('http://'):]}"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        try:
            wait_for("prometheus ready", lambda: cls.get_ok("/-/ready"))
        except AssertionError:
            cls.tearDownClass()
            raise
        cls.c = qdpc.Client()

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        try:
            cls.proc.wait(20)
        except subprocess.TimeoutExpired:
            cls.proc.kill()
        cls.log.close()

    @classmethod
    def get_ok(cls, path):
        try:
            with urllib.request.urlopen(cls.api + path, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr):
        url = self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        self.assertEqual(body["status"], "success", f"{expr}: {body}")
        return body["data"]["result"]

    def scalar(self, expr):
        r = self.query(expr)
        return float(r[0]["value"][1]) if r else None

    def test_jobs_are_seen_and_a_quantile_computed(self):
        wait_for("qdpd's target up", lambda: self.scalar('up{job="qdp"}') == 1)
        base = self.scalar('sum(qdp_jobs_total{code="OK"})') or 0
        for round_ in range(4):  # over several scrapes, so that rates have two points
            for k in range(5):
                s = self.c.encode("angle", 4, values=np.full(4, 0.1 * (k + 1)))
                self.c.release(s)
            time.sleep(1.2)
        wait_for("20 jobs in Prometheus",
                 lambda: (self.scalar('sum(qdp_jobs_total{code="OK"})') or 0) >= base + 20)
        self.assertEqual(self.scalar('sum(qdp_jobs_total{code="OK",encoding="angle"})') - base,
                         20)
        q = wait_for("a p50 from the buckets", lambda: self.scalar(
            'histogram_quantile(0.5, sum by (le) (rate(qdp_job_duration_seconds_bucket[30s])))'))
        self.assertTrue(math.isfinite(q) and 0 < q < 10, q)
        self.assertEqual(self.scalar('qdp_rank_up{rank="0"}'), 1)
        self.assertEqual(self.scalar("count(qdp_device_memory_budget_bytes)"), 4)

    def test_the_alert_rules_load_and_pass_their_unit_tests(self):
        groups = wait_for("the rules loaded", lambda: json.load(urllib.request.urlopen(
            self.api + "/api/v1/rules", timeout=10))["data"]["groups"])
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        self.assertEqual(set(rules), {"QdpDown", "QdpRankLost", "QdpDeviceMemoryNearBudget",
                                      "QdpJobErrorRate", "QdpJobLatencyHigh",
                                      "QdpStuckDraining"})
        for name, r in rules.items():
            self.assertEqual(r["health"], "ok", f"{name}: {r.get('lastError')}")
        for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULES_TEST)]):
            p = subprocess.run(["promtool", *args], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, f"promtool {' '.join(args)}:\n{p.stdout}{p.stderr}")

    def test_every_dashboard_query_evaluates(self):
        wait_for("qdpd's target up", lambda: self.scalar('up{job="qdp"}') == 1)
        dash = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        self.assertGreaterEqual(len(exprs), 15)
        documented = set(re.findall(r"`(qdp_[a-z_]+)`", (ROOT / "docs" / "metrics.md")
                                    .read_text()))
        for e in exprs:
            for name in re.findall(r"\b(qdp_[a-z_]+?)(?:_bucket)?\b", e):
                self.assertIn(name, documented, f"{e}: {name} is not in docs/metrics.md")
            self.query(e.replace("$__rate_interval", "30s").replace("$instance", ".*"))
        self.assertEqual(self.scalar('sum(qdp_states{instance=~".*"})'), self.c.status().states)


if __name__ == "__main__":
    missing = [t for t in ("prometheus", "promtool") if shutil.which(t) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed (Debian's prometheus package)")
        sys.exit(77)
    r = unittest.main(verbosity=2, exit=False)
    sys.exit(0 if r.result.wasSuccessful() else 1)
