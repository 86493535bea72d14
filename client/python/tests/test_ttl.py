"""A state's lifetime: a ttl that is not seconds > 0 is refused, one above the daemon's max_ttl
is capped with a qdp.TtlCappedWarning, and StateInfo says what each state got; the same for
State.gather, which copies a state onto one device."""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np
import pytest

import qdp

import qdpref as ref
from conftest import Daemon, _start, client_of

MAX_TTL, DEFAULT_TTL = 600, 300


@pytest.fixture(scope="module")
def capping_daemon() -> Iterator[Daemon]:
    """qdpd on cpu:2 with max_ttl 600 s and default_ttl 300 s."""
    yield from _start("--max-ttl", str(MAX_TTL), "--default-ttl", str(DEFAULT_TTL))


@pytest.fixture
def capped(capping_daemon: Daemon) -> Iterator[qdp.Client]:
    yield from client_of(capping_daemon)


BAD_TTLS = [-1, 0, -0.5, 0.0, float("nan"), float("inf"), float("-inf"), "60", True,
            np.float64("nan"), np.int64(-5)]


@pytest.mark.parametrize("ttl", BAD_TTLS, ids=repr)
def test_a_ttl_that_is_not_a_lifetime_is_refused(capped: qdp.Client, ttl) -> None:
    with pytest.raises(qdp.InvalidArgument) as e:
        capped.encode([0.1, 0.2], "angle", 2, ttl=ttl)
    assert e.value.field == "ttl" and "None for the daemon's default_ttl" in e.value.message
    with capped.encode([0.1, 0.2], "angle", 2) as s:
        with pytest.raises(qdp.InvalidArgument) as e:
            s.gather("cpu:0", ttl=ttl)
        assert e.value.field == "ttl"
    assert capped.states() == []


@pytest.mark.parametrize("ttl,given", [(None, DEFAULT_TTL), (100, 100), (99.2, 100),
                                       (0.25, 1), (MAX_TTL, MAX_TTL), (np.int32(7), 7)])
def test_a_ttl_within_max_ttl_is_what_the_state_gets(capped: qdp.Client, ttl, given) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", qdp.TtlCappedWarning)
        with capped.encode([0.1, 0.2], "angle", 2, ttl=ttl) as s:
            info = s.info
    assert (info.ttl_seconds, info.ttl_capped) == (given, False)


@pytest.mark.parametrize("ttl", [MAX_TTL + 1, 1e9, 1e30, 1 << 70])
def test_a_ttl_above_max_ttl_is_capped_with_a_warning(capped: qdp.Client, ttl) -> None:
    with pytest.warns(qdp.TtlCappedWarning) as w:
        s = capped.encode([0.1, 0.2], "angle", 2, ttl=ttl)
    with s:
        (warning,) = w
        assert warning.filename == __file__  # the caller's line, not the package's
        text = str(warning.message)
        assert f"ttl={ttl!r} s was asked for" in text and f"gave it {MAX_TTL} s" in text
        assert s.handle in text
        info = s.info
        assert (info.ttl_seconds, info.ttl_capped) == (MAX_TTL, True)
        (listed,) = capped.states()
        assert (listed.ttl_seconds, listed.ttl_capped) == (MAX_TTL, True)


def test_a_capped_state_refused_as_an_error_is_freed(capped: qdp.Client) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", qdp.TtlCappedWarning)
        with pytest.raises(qdp.TtlCappedWarning):
            capped.encode([0.1, 0.2], "angle", 2, ttl=1e9)
    assert capped.states() == []


def test_gather_copies_a_sharded_state_onto_one_device(client: qdp.Client) -> None:
    X = np.random.default_rng(8).uniform(-1, 1, size=(4, 6))
    with client.encode(X, "angle", 6, policy="batch") as s:
        assert {sh.device for sh in s.info.shards} == {"cpu:0", "cpu:1"}
        for device in ("cpu:1", 0):
            with s.gather(device, label="whole") as g:
                info = g.info
                want = "cpu:1" if device == "cpu:1" else "cpu:0"
                assert [sh.device for sh in info.shards] == [want] and info.label == "whole"
                assert g.shape == s.shape == (4, 64) and g.handle != s.handle
                ref.assert_close(g.numpy(), ref.batch("angle", X, 6), "complex128")
        with pytest.raises(qdp.InvalidArgument) as e:
            s.gather("cpu:7")
        assert e.value.field == "device"
        with pytest.raises(qdp.InvalidArgument) as e:
            s.gather(None)  # type: ignore[arg-type]
        assert e.value.field == "device"


def test_gather_warns_of_a_capped_ttl(capped: qdp.Client) -> None:
    with capped.encode([0.1, 0.2], "angle", 2, ttl=60) as s:
        with pytest.warns(qdp.TtlCappedWarning, match=f"gave it {MAX_TTL} s") as w:
            g = s.gather("cpu:0", ttl=7200)
        assert w[0].filename == __file__
        with g:
            assert (g.info.ttl_seconds, g.info.ttl_capped) == (MAX_TTL, True)
            assert (s.info.ttl_seconds, s.info.ttl_capped) == (60, False)
