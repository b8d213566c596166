"""What the proxy's own calls cost, per chat and UTC day."""

from __future__ import annotations

from pathlib import Path

from proxy.sillytavern.chatfile import STMessage
from proxy.store import Database
from proxy.store.usage import utc_day
from tests.test_store import clock, record

DAY = 86400.0


def test_calls_add_up_per_day_and_in_all(tmp_path: Path) -> None:
    db = Database(tmp_path / "s.sqlite3", clock)
    for chat in ("u/chats/S/a", "u/chats/S/b"):
        db.save_chat(record(chat), [], [], lambda i: STMessage(), [])
    yesterday, today = 10 * DAY + 5, 11 * DAY + 7
    db.usage.add("u/chats/S/a", "scene_recap", yesterday, 1000, 200)
    db.usage.add("u/chats/S/a", "scene_recap", today, 900, 100)
    db.usage.add("u/chats/S/a", "running_recap", today, 50, 10)
    db.usage.add("u/chats/S/b", "scene_recap", yesterday, 7, 3)
    db.usage.add("u/chats/S/gone", "scene_recap", today, 7, 3)  # no such chat: not kept
    found = db.usage.totals(today)
    assert found["u/chats/S/a"] == {
        "today": {"calls": 2, "prompt_tokens": 950, "answer_tokens": 110},
        "total": {"calls": 3, "prompt_tokens": 1950, "answer_tokens": 310},
    }
    assert found["u/chats/S/b"]["today"] == {"calls": 0, "prompt_tokens": 0, "answer_tokens": 0}
    assert set(found) == {"u/chats/S/a", "u/chats/S/b"}
    assert set(db.usage.totals(today, "u/chats/S/b")) == {"u/chats/S/b"}
    assert utc_day(today) == "1970-01-12"
    db.close()
