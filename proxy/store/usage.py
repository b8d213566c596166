"""What the proxy's own LLM calls cost, per chat, UTC day and operation (store thread).

A row per (chat, day, operation) that each call adds to: the dashboard and the CLI show
a chat's calls and tokens today and in all, the queue page the whole proxy's.
"""

from __future__ import annotations

import time

from proxy.store.records import Table

COUNTS = ("calls", "prompt_tokens", "answer_tokens")
Totals = dict[str, dict[str, int]]  # {"today": {...}, "total": {...}}


def utc_day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class UsageTable(Table):
    def add(self, chat_id: str, operation: str, at: float, prompt: int, answer: int) -> None:
        """One call; a chat that is gone from the store is not counted (nothing to show)."""
        with self.transaction():
            if self.db.execute("SELECT 1 FROM chats WHERE id=?", (chat_id,)).fetchone() is None:
                return
            self.db.execute(
                "INSERT INTO usage (chat_id, day, operation, calls, prompt_tokens, answer_tokens)"
                " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (chat_id, day, operation) DO UPDATE SET"
                " calls = calls + 1, prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " answer_tokens = answer_tokens + excluded.answer_tokens",
                (chat_id, utc_day(at), operation, prompt, answer),
            )

    def totals(self, now: float, chat_id: str | None = None) -> dict[str, Totals]:
        """chat -> `{"today": {...}, "total": {...}}`, each `{calls, prompt_tokens,
        answer_tokens}`; only chats with calls (one chat's, when named)."""
        where, args = ("WHERE chat_id = ?", (chat_id,)) if chat_id else ("", ())
        rows = self.db.execute(
            "SELECT chat_id, day = ? AS today, SUM(calls), SUM(prompt_tokens), "
            f"SUM(answer_tokens) FROM usage {where} GROUP BY chat_id, today",
            (utc_day(now), *args),
        ).fetchall()
        found: dict[str, Totals] = {}
        for chat, today, *counts in rows:
            entry = found.setdefault(chat, {"today": _empty(), "total": _empty()})
            for key, value in zip(COUNTS, counts, strict=True):
                entry["total"][key] += value
                if today:
                    entry["today"][key] = value
        return found


def _empty() -> dict[str, int]:
    return dict.fromkeys(COUNTS, 0)
