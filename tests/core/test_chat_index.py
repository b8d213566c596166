"""The chat index: each chat's newest messages by their fingerprints, and the chats that
hold a fingerprint, kept right through puts and removals."""

from __future__ import annotations

import random

from proxy.core.chat_index import (
    TAIL,
    TEXT_KEPT,
    ChatIndex,
    fingerprint,
    index_message,
    message_fingerprint,
    readings,
)
from proxy.memory.settings import MemorySettings
from tests.core.test_identify import GREETING, entry


def test_index_resolves_names_and_forgets_removed_chats() -> None:
    index = ChatIndex()
    index.put(entry("u/chats/S/Seraphina - 1", 1.0, [(False, "Seraphina", "Hi.")]))
    assert index.resolve("Seraphina - 1.jsonl") == "u/chats/S/Seraphina - 1"
    assert index.resolve("u/chats/S/Seraphina - 1") == "u/chats/S/Seraphina - 1"
    assert index.resolve("nope") is None
    index.remove("u/chats/S/Seraphina - 1")
    assert index.by_fp == {} and index.entries == {}


def test_the_index_keeps_fingerprints_of_its_tail_and_text_of_its_newest() -> None:
    # Three chats sharing a greeting; one of 80 messages, more than the tail holds.
    index = ChatIndex()
    long = [
        (bool(i % 2), "Alex" if i % 2 else "Seraphina", f"line {i} of the long one")
        for i in range(80)
    ]
    for name, texts in (
        ("u/chats/S/a", [(False, "Seraphina", GREETING), (True, "Alex", "a's first")]),
        ("u/chats/S/b", [(False, "Seraphina", GREETING), (True, "Alex", "b's first")]),
        ("u/chats/S/long", [(False, "Seraphina", GREETING), *long]),
    ):
        index.put(entry(name, 1.0, texts))
    tail = index.entries["u/chats/S/long"].tail
    assert len(tail) == TAIL and tail[-1].position == 80
    # Only the newest `TEXT_KEPT` keep their text; every one keeps its fingerprints.
    assert [m.text for m in tail[-TEXT_KEPT:]] == [
        f"line {i} of the long one" for i in range(80 - TEXT_KEPT, 80)
    ]
    assert {m.text for m in tail[:-TEXT_KEPT]} == {""}
    assert [m.fps for m in tail] == [
        index_message(i, *long[i - 1], char="Seraphina", user="Alex").fps
        for i in range(80 - TAIL + 1, 81)
    ]
    old_line = message_fingerprint(f"line {80 - TAIL} of the long one")
    assert index.by_fp[old_line] == ("u/chats/S/long",)
    assert message_fingerprint("line 15 of the long one") not in index.by_fp  # out of the tail
    greeting = message_fingerprint("*You wake in a glade.* Welcome, Alex.")
    assert index.by_fp[greeting] == ("u/chats/S/a", "u/chats/S/b")  # the long one's is gone
    # Put again (ST saved) and removed: a shared fingerprint keeps its other holders once.
    index.put(entry("u/chats/S/a", 2.0, [(False, "Seraphina", GREETING), (True, "Alex", "a2")]))
    assert index.by_fp[greeting] == ("u/chats/S/b", "u/chats/S/a")
    index.remove("u/chats/S/b")
    assert index.by_fp[greeting] == ("u/chats/S/a",)
    assert index.candidates([greeting, old_line]) == {"u/chats/S/a", "u/chats/S/long"}
    for chat_id in ("u/chats/S/a", "u/chats/S/long"):
        index.remove(chat_id)
    assert index.by_fp == {} and index.entries == {}


def test_a_messages_fingerprints_are_those_of_each_way_a_request_carries_it() -> None:
    # `index_message` normalises each text once; what it gives must be what fingerprinting
    # every variant whole gives, whatever the whitespace (ST keeps it as typed).
    rng = random.Random(3)
    pieces = ["a", "Ava", "{{char}}", "{{USER}}", "{{user}}", ":", "é", " ", "  ", "\n", "\t",
              "\u00a0", "\u2003", ""]  # fmt: skip
    for _ in range(3000):
        name = "".join(rng.choices(pieces, k=rng.randint(0, 3)))
        text = "".join(rng.choices(pieces, k=rng.randint(0, 8)))
        char, user = rng.choice(["", "Sera"]), rng.choice(["", "Alex", " Al  ex "])
        variants = {text, f"{name}: {text}"}
        if "{{" in text:
            filled = text
            for macro, value in (("{{char}}", char or name), ("{{user}}", user)):
                if value:
                    filled = filled.replace(macro, value).replace(macro.upper(), value)
            variants |= {filled, f"{name}: {filled}"}
        message = index_message(0, False, name, text, char=char, user=user)
        assert sorted(message.fps) == sorted({fingerprint(v) for v in variants}), (name, text)
        assert message.text == " ".join(text.split())


def test_the_text_kept_covers_every_message_the_engine_ranks_scenes_by() -> None:
    # `MemoryEngine.foresee` reads the text of a chat's newest `relevant_scenes_context`
    # messages from the index: a larger setting would read texts the index dropped.
    field = MemorySettings.model_fields["relevant_scenes_context"]
    most = next(m.le for m in field.metadata if getattr(m, "le", None) is not None)
    assert most <= TEXT_KEPT


def test_a_request_text_is_read_as_it_is_and_past_a_speakers_name() -> None:
    assert readings("Seraphina: The glade.") == ("Seraphina: The glade.", "The glade.")
    assert readings("The glade: a clearing.") == ("The glade: a clearing.", "a clearing.")
    assert readings("No name here.") == ("No name here.",)
    assert readings("Seraphina: ") == ("Seraphina: ",)  # nothing after the name
    long = "x" * 41 + ": text"
    assert readings(long) == (long,)  # longer than a name
