"""bench/regress.py on folders written here: hand-computed verdicts. A figure slower than its band
(the larger of --band and the spread of its repeats) fails the gate; one within it, one only in the
new folder, and (with --common) one only in the old pass; a missing one fails without --common.
A compact baseline (--summarize) keeps each figure's best and band: the same verdicts as its runs.

Usage: python3 test_regress.py REGRESS_PY
"""

import pathlib
import subprocess
import sys
import tempfile
import unittest

REGRESS = sys.argv.pop(1) if len(sys.argv) > 1 else "bench/regress.py"


def write(folder, name, lines):
    path = pathlib.Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


class Regress(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.old = pathlib.Path(self.tmp.name) / "old"
        self.new = pathlib.Path(self.tmp.name) / "new"

    def tearDown(self):
        self.tmp.cleanup()

    def run_gate(self, *extra):
        p = subprocess.run([sys.executable, REGRESS, *extra, str(self.old), str(self.new)],
                           capture_output=True, text=True, timeout=60)
        verdicts = {}
        for line in p.stdout.splitlines():
            if line.startswith("bench "):
                verdicts[line.split()[1]] = line.split()[-1] if "runs)" not in line else \
                    line.rsplit("(", 1)[0].split()[-1]
        return p.returncode, verdicts, p.stdout

    def test_a_figure_past_its_band_fails_one_within_passes(self):
        # a: two runs of 10 and 11 ms, a spread of 10 %: 10.8 ms is within it. b: 100/s once,
        # band 2 %: 97/s is 3.1 % worse. c: a new figure. Other lines are not figures.
        write(self.old, "r1.txt", ["bench op=a n=1 ms=10 target_ms=5", "bench op=b n=1 jobs=3 "
                                   "vectors_per_s=100", "# comment", "bench op=x nothing=1"])
        write(self.old, "sub/r2.txt", ["bench op=a n=1 ms=11"])
        write(self.new, "r.txt", ["bench op=a n=1 ms=10.8 speedup=2", "bench op=b n=1 jobs=9 "
                                  "vectors_per_s=97", "bench op=c n=1 ms=1"])
        rc, v, out = self.run_gate()
        self.assertEqual(rc, 1, out)
        self.assertEqual(v, {"op=a": "ok", "op=b": "WORSE", "op=c": "new"}, out)
        write(self.new, "r.txt", ["bench op=a n=1 ms=10.8", "bench op=b n=1 vectors_per_s=98.5"])
        rc, v, out = self.run_gate()
        self.assertEqual((rc, v["op=b"]), (0, "ok"), out)  # 1.5 % worse: within 2 %
        rc, v, out = self.run_gate("--band", "0.5")
        self.assertEqual((rc, v["op=b"]), (1, "WORSE"), out)

    def test_a_figure_missing_from_the_new_run_fails_unless_common(self):
        write(self.old, "r.txt", ["bench op=a n=1 ms=10", "bench op=d n=1 p50_us=40"])
        write(self.new, "r.txt", ["bench op=a n=1 ms=9"])
        rc, v, out = self.run_gate()
        self.assertEqual((rc, v), (1, {"op=a": "ok", "op=d": "MISSING"}), out)
        rc, v, out = self.run_gate("--common")
        self.assertEqual(rc, 0, out)
        self.assertIn("not run", out)

    def test_a_job_line_is_one_figure_whatever_its_phase_times(self):
        # world_bench's lines carry the job's phases beside its p50: outcomes, not parameters.
        write(self.old, "r.txt", ["bench op=local qubits=30 jobs=5 plan_p50_us=72.6 "
                                  "p50_us=1500 p99_us=1600 encode_p50_us=1490 collective=none",
                                  "bench op=cold qubits=30 jobs=3 p50_us=6000 input_gb_s=1.41"])
        write(self.new, "r.txt", ["bench op=local qubits=30 jobs=5 plan_p50_us=80.9 "
                                  "p50_us=360 p99_us=380 encode_p50_us=355 collective=none",
                                  "bench op=cold qubits=30 jobs=3 p50_us=6500 input_gb_s=1.31"])
        rc, v, out = self.run_gate()
        self.assertEqual((rc, v), (1, {"op=local": "ok", "op=cold": "WORSE"}), out)

    def test_a_round_trip_is_one_figure_whatever_its_sample_count(self):
        # qdpd_bench's n is the --jobs it timed: runs of 2000 and 5000 samples repeat one figure,
        # so their spread (100 to 120 us, 20 %) is its band and 115 us passes; a kernel's n (its
        # qubits) still tells figures apart.
        # So does a pass's stride s, a whole number, where a loader line's s=0.00013 (seconds) is
        # an outcome.
        write(self.old, "r.txt", ["bench op=roundtrip job=small n=2000 p50_us=100",
                                  "bench op=roundtrip job=small n=5000 p50_us=120",
                                  "bench op=iqp n=26 ms=1.0", "bench op=iqp n=30 ms=20",
                                  "bench op=pass s=9 m=9 ms=8", "bench op=pass s=18 m=9 ms=9",
                                  "bench op=fill rows=64 s=0.00013 vectors_per_s=100"])
        write(self.new, "r.txt", ["bench op=roundtrip job=small n=2000 p50_us=115",
                                  "bench op=iqp n=26 ms=1.5", "bench op=iqp n=30 ms=20",
                                  "bench op=pass s=9 m=9 ms=8", "bench op=pass s=18 m=9 ms=9",
                                  "bench op=fill rows=64 s=0.00014 vectors_per_s=100"])
        rc, _, out = self.run_gate()
        self.assertEqual(rc, 1, out)
        verdict = {" ".join(l.split()[1:4]): l.rsplit("(", 1)[0].split()[-1]
                   for l in out.splitlines() if l.startswith("bench ")}
        self.assertEqual(verdict, {"op=roundtrip job=small p50_us": "ok", "op=iqp n=26 ms": "WORSE",
                                   "op=iqp n=30 ms": "ok", "op=pass s=9 m=9": "ok",
                                   "op=pass s=18 m=9": "ok", "op=fill rows=64 vectors_per_s": "ok"},
                         out)

    def test_measurements_beside_the_metric_are_not_parameters(self):
        # The loader's lines carry what they measured beside their rate (a waiting fraction, the
        # daemon's phase times, a min_ms, a ratio): each line is still the one figure of its
        # parameters, compared run to run. Before, every run's was new and none was compared.
        write(self.old, "r.txt", [
            "bench op=where what=loader group=16 prefetch=0 consumer_waiting_fraction=0.9897 "
            "vectors_per_s=1000000",
            "bench op=where what=encode-out rows=64 p50_ms=0.48 vectors_per_s=130000 "
            "daemon_encode_ms=0.0484 daemon_commit_ms=0",
            "bench op=py qubits=30 tensor=view ms=11.2 min_ms=10.8 qdp_over_qumat=11.4 "
            "peak_rss_GiB=2.008 budget_GiB=133.5"])
        write(self.new, "r.txt", [
            "bench op=where what=loader group=16 prefetch=0 consumer_waiting_fraction=0.9771 "
            "vectors_per_s=800000",
            "bench op=where what=encode-out rows=64 p50_ms=0.47 vectors_per_s=131000 "
            "daemon_encode_ms=0.0791 daemon_commit_ms=0",
            "bench op=py qubits=30 tensor=view ms=11.3 min_ms=10.9 qdp_over_qumat=12.5 "
            "peak_rss_GiB=7.719 budget_GiB=134.5"])
        rc, _, out = self.run_gate()
        self.assertEqual(rc, 1, out)
        verdicts = [l.rsplit("(", 1)[0].split()[-1] for l in out.splitlines()
                    if l.startswith("bench ")]
        self.assertEqual(sorted(verdicts), ["WORSE", "ok", "ok"], out)  # the loader, 20 % slower
        self.assertIn("group=16 prefetch=0", out)
        self.assertNotIn("consumer_waiting_fraction", out)

    def test_a_compact_baseline_keeps_each_figures_best_and_band(self):
        # The runs' folder: a at 10 and 11 ms (band 10 %), b at 100/s once (band 2 %), c once.
        write(self.old, "r1.txt", ["bench op=a n=1 ms=10 speedup=2", "bench op=b n=1 jobs=3 "
                                   "vectors_per_s=100", "# comment"])
        write(self.old, "sub/r2.txt", ["bench op=a n=1 ms=11", "bench op=c n=1 p50_us=40"])
        p = subprocess.run([sys.executable, REGRESS, "--summarize", str(self.old)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([l for l in p.stdout.splitlines() if not l.startswith("#")],
                         ["bench op=a n=1 ms=10 worst=11 runs=2",
                          "bench op=b n=1 vectors_per_s=100", "bench op=c n=1 p50_us=40"], p.stdout)
        compact = pathlib.Path(self.tmp.name) / "h200.txt"
        compact.write_text(p.stdout)
        # 10.8 ms is within a's 10 %, 11.5 ms is not; 97/s is 3.1 % below b's 100 with no repeats.
        for a, b, verdicts in (("10.8", "100", {"op=a": "ok", "op=b": "ok"}),
                               ("11.5", "100", {"op=a": "WORSE", "op=b": "ok"}),
                               ("10", "97", {"op=a": "ok", "op=b": "WORSE"})):
            write(self.new, "r.txt", [f"bench op=a n=1 ms={a}",
                                      f"bench op=b n=1 vectors_per_s={b}"])
            from_folder = self.run_gate("--common")
            self.old, folder = compact, self.old
            from_file = self.run_gate("--common")
            self.old = folder
            # c, only in the baseline, is "not run" (the verdict's last word here).
            self.assertEqual(from_file[:2], (1 if "WORSE" in verdicts.values() else 0,
                                             dict(verdicts, **{"op=c": "run"})), from_file[2])
            self.assertEqual(from_file[2], from_folder[2])  # the same table as from the folder

    def test_a_run_at_its_baselines_worst_repeat_passes(self):
        # The band is the spread of the baseline's repeats, so a run that equals its slowest repeat
        # is within it, in the folder and in its compact form alike, however the division rounds
        # (these pairs are ones whose band and ratio differ in their last bits).
        write(self.old, "r1.txt", ["bench op=r n=1 p50_us=192.9", "bench op=v n=1 vectors_per_s="
                                   "2638478"])
        write(self.old, "r2.txt", ["bench op=r n=1 p50_us=218.6", "bench op=v n=1 vectors_per_s="
                                   "2461893"])
        write(self.new, "r.txt", ["bench op=r n=1 p50_us=218.6", "bench op=v n=1 vectors_per_s="
                                  "2461893"])
        rc, v, out = self.run_gate()
        self.assertEqual((rc, v), (0, {"op=r": "ok", "op=v": "ok"}), out)
        p = subprocess.run([sys.executable, REGRESS, "--summarize", str(self.old)],
                           capture_output=True, text=True, timeout=60)
        self.old = pathlib.Path(self.tmp.name) / "h200.txt"
        self.old.write_text(p.stdout)
        rc, v, out = self.run_gate()
        self.assertEqual((rc, v), (0, {"op=r": "ok", "op=v": "ok"}), out)

    def test_a_compact_figure_with_a_bad_band_is_an_error_that_names_it(self):
        write(self.new, "r.txt", ["bench op=a n=1 ms=9"])
        for line, says in (("bench op=a n=1 ms=10 worst=9 runs=2", "worst=9"),
                           ("bench op=a n=1 ms=10 worst=12", "worst=12 runs=(none)"),
                           ("bench op=a n=1 ms=10 worst=12 runs=two", "worst=12 runs=two")):
            compact = pathlib.Path(self.tmp.name) / "h200.txt"
            compact.write_text(line + "\n")
            p = subprocess.run([sys.executable, REGRESS, str(compact), str(self.new)],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn(f"{compact}:1: {says}", p.stderr)

    def test_a_file_that_cannot_be_read_is_an_error_that_names_it(self):
        write(self.old, "r.txt", ["bench op=a n=1 ms=10"])
        write(self.new, "r.txt", ["bench op=a n=1 ms=10"])
        (self.new / "gone.txt").symlink_to(self.new / "nowhere.txt")
        p = subprocess.run([sys.executable, REGRESS, str(self.old), str(self.new)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn(f"cannot read {self.new / 'gone.txt'}", p.stderr)
        self.assertNotIn("Traceback", p.stderr)

    def test_an_empty_baseline_is_an_error(self):
        write(self.old, "r.txt", ["nothing here"])
        write(self.new, "r.txt", ["bench op=a n=1 ms=9"])
        rc, _, _ = self.run_gate()
        self.assertNotEqual(rc, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
