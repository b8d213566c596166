"""The names a chat's prompts use: as the chat names them, for characters and groups."""

from __future__ import annotations

from dataclasses import replace

from proxy.memory.chatinfo import chat_names
from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event
from proxy.store import Database
from tests.test_store import clock, record


def save(db: Database, chat_id: str, messages: list[STMessage], **fields: object) -> None:
    chat = replace(record(chat_id), messages=len(messages), **fields)  # type: ignore[arg-type]
    digests = [f"d{i}".encode() for i in range(len(messages))]
    events = [Event("added", i) for i in range(len(messages))]
    db.save_chat(chat, [None] * len(messages), digests, lambda i: messages[i], events)


def persona(user: str) -> str:
    return "Persona"


def test_a_character_chat_uses_the_characters_name_not_its_folder() -> None:
    db = Database(":memory:", clock)
    messages = [STMessage(name="Seraphina", mes="Welcome."), STMessage(name="Alex", is_user=True)]
    save(db, "u/chats/default_Seraphina/c", messages, character="default_Seraphina",
         character_name="Seraphina")  # fmt: skip
    assert chat_names(db, "u/chats/default_Seraphina/c", persona) == {
        "char": "Seraphina",
        "user": "Alex",
    }


def test_a_group_chat_names_its_speaking_members() -> None:
    db = Database(":memory:", clock)
    messages = [
        STMessage(name="Orin", mes="Ah, company."),
        STMessage(name="Seraphina", mes="Welcome."),
        STMessage(name="System", mes="Night falls.", narrator=True),
        STMessage(name="Orin", mes="Again."),
    ]
    save(db, "u/group chats/g", messages, kind="group", character=None, group_name="Harness")
    # no user message yet: the persona stands for the user
    assert chat_names(db, "u/group chats/g", persona) == {
        "char": "Orin and Seraphina",
        "user": "Persona",
    }
    save(db, "u/group chats/quiet", [], kind="group", character=None, group_name="Harness")
    assert chat_names(db, "u/group chats/quiet", persona)["char"] == "Harness"
