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
    """`{{char}}` and `{{user}}` for a chat's prompts, as the chat names them (never the
    folder ST keeps a character in): the character, or a group's members who speak in its
    newest messages ("Orin and Seraphina"), else the group's name; and the name the user
    wrote under most recently, else their persona."""
    chat = db.chat(chat_id)
    if chat is None:
        return {"char": "", "user": ""}
    _, visible = db.speakers_tail(chat_id, 40)
    user = next((m.name for m in reversed(visible) if m.is_user), "")
    char = chat.display_name
    if chat.kind == "group":
        speakers = [m.name for m in visible if not (m.is_user or m.narrator) and m.name]
        *others, last = list(dict.fromkeys(speakers)) or [char]
        char = f"{', '.join(others)} and {last}" if others else last
    return {"char": char, "user": user or persona(chat.user)}
