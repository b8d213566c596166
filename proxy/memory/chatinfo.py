"""What the memory reads of a chat besides its memory: the names its prompts use and
which swipe of a message counts. Store thread."""

from __future__ import annotations

from collections.abc import Callable

from proxy.store import Database
from proxy.store.records import MessageRecord

# The user's persona name from ST's settings, by ST user folder (the library's cache).
PersonaLookup = Callable[[str], str]


def swipe_of(record: MessageRecord) -> int:
    """The swipe ST shows (and a recap is written for)."""
    return record.message.swipe_id or 0


def chat_names(db: Database, chat_id: str, persona: PersonaLookup) -> dict[str, str]:
    """`{{char}}` and `{{user}}` for a chat's prompts: the character or group, and the
    name the user wrote under most recently (else their persona)."""
    chat = db.chat(chat_id)
    if chat is None:
        return {"char": "", "user": ""}
    _, visible = db.tail(chat_id, 20)
    user = next((m.message.name for m in reversed(visible) if m.message.is_user), "")
    return {"char": chat.display_name, "user": user or persona(chat.user)}
