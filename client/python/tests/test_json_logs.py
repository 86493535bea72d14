"""qdpd with log_format = json: every line of its log, from start to stop, is one JSON object
with the documented fields, and a refused call's line carries the message."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import qdp

from conftest import _start


def test_every_line_is_a_json_object() -> None:
    for d in _start("--log-format", "json", "--log-level", "debug"):
        with qdp.Client(d.target) as c:
            c.encode(np.ones(4), "amplitude", 2).release()
            with pytest.raises(qdp.InvalidArgument):
                c.encode(np.ones(4), "angle", 3)
        assert d.stop() == 0  # its last lines too, before the folder goes
        lines = pathlib.Path(d.log).read_text().splitlines()
    assert len(lines) > 5
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    for r in records:
        assert {"ts", "level", "ident", "msg"} <= r.keys(), r
        assert r["ident"] == "qdpd" and r["ts"].endswith("Z")
        assert r["level"] in ("err", "warning", "notice", "info", "debug")
    subsystems = {r.get("subsys") for r in records}
    assert "rpc" in subsystems and "main" in subsystems
    assert any("Encode" in r["msg"] and r["level"] in ("info", "notice", "warning")
               for r in records if r.get("subsys") == "rpc")
    # One line per finished job: its number, what it made and its phases; the refusal's too.
    done = [r for r in records if r.get("status") == "OK" and r.get("encoding")]
    assert len(done) == 1, done
    r = done[0]
    assert (r["encoding"], r["qubits"], r["bytes"], r["policy"]) == ("amplitude", "2", "64",
                                                                      "single"), r
    for phase in ("ingest", "plan", "encode", "collective", "commit"):
        assert float(r[phase + "_ms"]) >= 0, (phase, r)
    assert float(r["collective_ms"]) == 0  # one device
    refused = [x for x in records if x.get("status") == "INVALID_ARGUMENT"]
    assert len(refused) == 1 and int(refused[0]["job"]) == int(r["job"]) + 1, refused
