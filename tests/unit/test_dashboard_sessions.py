"""The dashboard's session table: ids and CSRF tokens are fresh per session, expiry and a size bound keep it
small, a read without a cookie stores nothing."""

from __future__ import annotations

import time

from rocketmesh.dashboard.accounts import Account
from rocketmesh.dashboard.sessions import Sessions


def test_each_session_has_its_own_id_and_token_and_checks_only_its_own() -> None:
    table = Sessions(timeout_s=60)
    a, b = table.new(), table.new()
    assert a.sid != b.sid and a.csrf != b.csrf
    assert a.csrf_ok(a.csrf) and not a.csrf_ok(b.csrf) and not a.csrf_ok("") and not a.csrf_ok(None)
    assert table.get(a.sid) is a and table.get("nope") is None and table.get(None) is None


def test_an_unused_session_expires() -> None:
    table = Sessions(timeout_s=0.05)
    s = table.new()
    time.sleep(0.1)
    assert table.get(s.sid) is None


def test_past_the_bound_the_least_recently_used_goes_first() -> None:
    table = Sessions(timeout_s=60, max_sessions=3)
    first, second, third = table.new(), table.new(), table.new()
    table.get(first.sid)  # used again: now the second is the least recently used
    fourth = table.new()
    assert table.get(second.sid) is None
    assert all(table.get(s.sid) is s for s in (first, third, fourth))


def test_a_session_for_one_request_is_not_stored() -> None:
    table = Sessions(timeout_s=60)
    s = table.new(keep=False)
    assert table.get(s.sid) is None and table.accounts() == set()


def test_the_latest_signed_in_account_samples_and_a_secret_never_shows() -> None:
    table = Sessions(timeout_s=60)
    assert table.latest_account() is None
    table.new(Account("alice", "alice-secret"), signed_in=True)
    time.sleep(0.01)
    table.new(Account("bob", "bob-secret"), signed_in=True)
    latest = table.latest_account()
    assert latest is not None and latest.access_key == "bob" and "bob-secret" not in repr(latest)
