"""Bursts of failed sign-ins (``domain/signins.py``): refused past the limit with the seconds to
wait, never with a limit of 0, and summaries of the bursts that ended, not of those still going."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpupool.domain.signins import SignInBursts

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_past_the_limit_a_try_is_refused_and_counted() -> None:
    bursts = SignInBursts(window_s=10, limit=3)
    for i in range(3):
        assert bursts.refuse("a", _at(i), "GET /x") is None
        bursts.failed("a", _at(i), "GET /x")
    assert bursts.refuse("a", _at(2.5), "GET /x") == 10  # 9.5 s left, said in whole seconds
    assert bursts.refuse("b", _at(2.5), "GET /x") is None  # another address is not slowed
    assert bursts.refuse("a", _at(12.4), "GET /x") == 1  # the refused try was a failure too: still going
    assert bursts.refuse("a", _at(23), "GET /x") is None  # quiet for the window


def test_a_limit_of_0_is_no_limit() -> None:
    bursts = SignInBursts(window_s=10, limit=0)
    for i in range(100):
        bursts.failed("a", _at(i / 100), "GET /x")
    assert bursts.refuse("a", _at(1), "GET /x") is None and bursts.wait_s("a", _at(1)) is None


def test_only_bursts_that_ended_are_summed_up_and_the_rest_kept() -> None:
    bursts = SignInBursts(window_s=10, limit=100)
    for client, at in (("old", 0), ("old", 1), ("old", 2), ("mid", 5), ("mid", 6), ("new", 9), ("new", 10)):
        bursts.failed(client, _at(at), "GET /x")
    assert bursts.ended(_at(11)) == []
    assert [(s.client, s.unrecorded) for s in bursts.ended(_at(12))] == [("old", 2)]
    assert [(s.client, s.unrecorded) for s in bursts.ended(_at(16.5))] == [("mid", 1)]
    assert bursts.failed("new", _at(16.5), "GET /x") is False  # still going: counted in its burst
    assert [(s.client, s.unrecorded) for s in bursts.ended(_at(17), everything=True)] == [("new", 2)]
