"""The console's credential checks (streams/console/auth.py) and action messages: pure."""

from __future__ import annotations

from db.console_audit import ActionOutcome
from streams.console import auth
from streams.console.actions import message
from streams.console.perform import declared_actions
from streams.timers.control import backfill_days

TOKEN = "k" * 40
NOW = 1_800_000_000.0


def verdict(
    headers: dict[str, str] | None = None,
    cookie: str | None = None,
    csrf: str | None = None,
    token: str = TOKEN,
) -> auth.Verdict:
    return auth.authorize(token, headers or {}, cookie, csrf, NOW)


def test_off_without_a_token_whatever_is_sent() -> None:
    assert verdict({"Authorization": "Bearer "}, token="").status == 403
    assert verdict({"Authorization": f"Bearer {TOKEN}"}, token="").status == 403


def test_bearer_right_wrong_and_missing() -> None:
    ok = verdict({"Authorization": f"Bearer {TOKEN}", "X-Operator": "dana"})
    assert ok.allowed and ok.actor == "dana"
    assert verdict({"Authorization": f"Bearer {TOKEN}"}).actor == "admin"
    assert verdict({"Authorization": f"Bearer {TOKEN}x"}).status == 403
    assert verdict({"Authorization": f"Basic {TOKEN}"}).status == 403
    assert verdict().status == 401


def test_session_needs_its_own_csrf_and_expires() -> None:
    cookie = auth.new_session(TOKEN, "erin", NOW)
    csrf = auth.csrf_token(TOKEN, cookie)
    assert verdict(cookie=cookie, csrf=csrf) == auth.Verdict(200, actor="erin")
    assert verdict(cookie=cookie).status == 403
    other = auth.new_session(TOKEN, "erin", NOW)
    assert verdict(cookie=cookie, csrf=auth.csrf_token(TOKEN, other)).status == 403
    forged = auth.new_session("z" * 40, "erin", NOW)
    assert verdict(cookie=forged, csrf=auth.csrf_token("z" * 40, forged)).status == 403
    # One character of the signature changed (never to itself: a 1 in 16 chance otherwise).
    tampered = cookie[:-1] + ("1" if cookie[-1] == "0" else "0")
    assert verdict(cookie=tampered, csrf=csrf).status == 403
    assert auth.session_actor(TOKEN, cookie, NOW + auth.SESSION_SECONDS + 1) is None
    assert TOKEN not in cookie and TOKEN not in csrf


def test_actor_names_are_plain() -> None:
    assert auth.actor_name("  frank.o@example  ") == "frank.o@example"
    assert auth.actor_name("<script>") == "admin"
    assert auth.actor_name("") == "admin"


def test_messages_say_what_came_of_it() -> None:
    cancel = declared_actions()[("calendar/reminders", "cancel")]
    refused = ActionOutcome("refused", "Sent", "Sent", 7)
    assert message(cancel, "r1", refused) == (
        "reminder r1 is Sent: only Pending reminders can be cancelled"
    )
    assert message(cancel, "r1", ActionOutcome("not_found", None, None, 8)) == "no reminder r1"
    assert "nothing changed" in message(
        cancel, "r1", ActionOutcome("unchanged", "Skipped", "Skipped", 9)
    )


def test_every_declared_action_has_a_unique_name_per_listing() -> None:
    keys = list(declared_actions())
    assert len(keys) == len(set(keys))
    assert {lst for lst, _ in keys} == {"calendar/reminders", "automation/scheduler"}


def test_backfill_days_are_bounded_and_ordered() -> None:
    from datetime import date

    import pytest

    assert backfill_days(date(2026, 1, 30), date(2026, 2, 2)) == [
        date(2026, 1, 30),
        date(2026, 1, 31),
        date(2026, 2, 1),
        date(2026, 2, 2),
    ]
    with pytest.raises(ValueError, match="before"):
        backfill_days(date(2026, 2, 2), date(2026, 2, 1))
    with pytest.raises(ValueError, match="at most"):
        backfill_days(date(2020, 1, 1), date(2026, 1, 1))
