"""The chat index: each chat's newest messages by their fingerprints, and the chats that
hold a fingerprint, kept right through puts and removals."""

from __future__ import annotations

from proxy.core.fingerprints import index_message, message_fingerprint
from proxy.identify.chat_index import TAIL, TEXT_KEPT, ChatIndex
from proxy.settings.memory import MemorySettings
from tests.identify.test_match import GREETING, entry


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


def test_the_text_kept_covers_every_message_the_engine_ranks_scenes_by() -> None:
    # `MemoryEngine.foresee` reads the text of a chat's newest `relevant_scenes_context`
    # messages from the index: a larger setting would read texts the index dropped.
    field = MemorySettings.model_fields["relevant_scenes_context"]
    most = next(m.le for m in field.metadata if getattr(m, "le", None) is not None)
    assert most <= TEXT_KEPT
