"""The encodings table (common/, exported as encodings.json by the build) against what is written
independently of it: the NumPy reference every test compares states with (tests/reference/
qdpref.py), which must have every encoding and its values per sample, and whose states show which
encodings are real; the independent wire client (tests/integration/qdpc.py), which must know every
encoding's number; the manual pages, which must list every encoding by name; and qdpctl, whose
help and bash completion must offer every one.

Usage: test_encoding_table.py ENCODINGS_JSON QDPCTL_1 QDPD_8 QDPCTL QDPCTL_BASH (qdpref and qdpc
on PYTHONPATH).
"""

import json
import re
import subprocess
import sys
import unittest

import numpy as np

import qdpc
import qdpref

JSON_PATH, QDPCTL_1, QDPD_8, QDPCTL, QDPCTL_BASH = sys.argv[1:6]


def load_table():
    with open(JSON_PATH, encoding="utf-8") as f:
        return json.load(f)["encodings"]


def roff_text(s):
    """A roff word as it reads: escapes of '-' undone, font changes dropped."""
    return re.sub(r"\\f[BIRP]", "", s.replace("\\-", "-")).strip()


class EncodingTable(unittest.TestCase):
    def setUp(self):
        self.table = load_table()
        self.names = [e["name"] for e in self.table]

    def test_the_reference_has_every_encoding(self):
        self.assertEqual(sorted(qdpref.REFERENCES), sorted(self.names),
                         "qdpref.REFERENCES must have a reference for each row of the table")

    def test_the_wire_client_has_every_encoding_with_its_number(self):
        self.assertEqual(qdpc.ENCODINGS, {e["name"]: e["number"] for e in self.table})

    def test_the_reference_takes_the_values_the_table_says(self):
        for e in self.table:
            for n in range(1, 17):
                self.assertEqual(qdpref.values_per_sample(e["name"], n),
                                 e["values_per_sample"][n - 1], f"{e['name']}, {n} qubits")

    def test_the_references_states_are_real_where_the_table_says(self):
        rng = np.random.default_rng(5)
        n = 3
        for e in self.table:
            k = e["values_per_sample"][n - 1]
            x = [2] if e["name"] == "basis" else rng.uniform(-1.5, 1.5, k)
            psi = qdpref.state(e["name"], x, n)
            self.assertEqual(psi.shape, (1 << n,), e["name"])
            self.assertAlmostEqual(float(np.sum(np.abs(psi) ** 2)), 1.0, 12, e["name"])
            imaginary = bool(np.any(np.abs(psi.imag) > 1e-12))
            self.assertEqual(imaginary, not e["real"],
                             f"{e['name']}: the table says real={e['real']}")

    def test_qdpctl_1_lists_every_encoding(self):
        with open(QDPCTL_1, encoding="utf-8") as f:
            page = f.read()
        section = re.search(r"^\.SH ENCODINGS\n(.*?)^\.SH ", page, re.S | re.M)
        self.assertIsNotNone(section, "qdpctl.1 has no ENCODINGS section")
        listed = [roff_text(m) for m in re.findall(r"^\.TP\n\.B (.*)$", section.group(1), re.M)]
        self.assertEqual(listed, self.names)

    def test_qdpd_8_lists_every_encoding(self):
        with open(QDPD_8, encoding="utf-8") as f:
            text = roff_text(" ".join(f.read().split()))
        m = re.search(r"on them \(([^()]*) encodings\)", text)
        self.assertIsNotNone(m, "qdpd.8 no longer says which encodings it has")
        listed = re.split(r", | and ", m.group(1))
        self.assertEqual(listed, self.names)

    def test_qdpctl_help_gives_every_encoding_and_its_values(self):
        out = subprocess.run([QDPCTL, "encode", "--help"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        section = re.search(r"^Encodings .*?\n(.*?)\n\n", out, re.S | re.M)
        self.assertIsNotNone(section, "qdpctl encode --help has no list of encodings")
        rows = [line.split(None, 1) for line in section.group(1).splitlines()]
        self.assertEqual(rows, [[e["name"], f"{e['count']} {e['noun']}"] for e in self.table])

    def test_the_completion_offers_every_encoding(self):
        got = subprocess.run(
            ["bash", "-c", '. "$1"; COMP_WORDS=("$2" encode --encoding ""); COMP_CWORD=3; '
             '_qdpctl; echo "${COMPREPLY[*]}"', "_", QDPCTL_BASH, QDPCTL],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(got.stdout.split(), self.names, got.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
