"""ST's quirks as named readings: each one on its own, and the matcher trying the list (a
reading added to a list is tried without a change to the matcher)."""

from __future__ import annotations

from collections.abc import Container, Sequence

import pytest

import proxy.identify.match as match
from proxy.core.fingerprints import IndexedMessage, fingerprint, index_message
from proxy.core.models import ChatMessage, HistorySpan, Identification
from proxy.core.placement import find_history
from proxy.identify import readings
from proxy.identify.chat_index import ChatEntry, ChatIndex
from proxy.identify.readings import HISTORY, MESSAGE, REQUEST, TEXT, Asked, Reading
from proxy.identify.reasoning import DEFAULT_REASONING

MARKERS = ("[Start a new Chat]",)
CHAT = [
    (False, "Seraphina", "*You wake in a glade.* Welcome, traveller."),
    (True, "Alex", "Where am I, and who are you?"),
    (False, "Seraphina", "In Eldoria's forest. I am its guardian, and you were hurt."),
    (True, "Alex", "Can you show me the way to the old mill by the river?"),
]


def chat_index(texts: Sequence[tuple[bool, str, str]] = CHAT) -> ChatIndex:
    tail = [index_message(i, u, name, text) for i, (u, name, text) in enumerate(texts)]
    index = ChatIndex()
    index.put(ChatEntry("Seraphina/glade", 1.0, len(tail), tail, name="glade"))
    return index


def request(*texts: tuple[str, str]) -> list[ChatMessage]:
    return [
        ChatMessage("system", "Write Seraphina's next reply."),
        ChatMessage("system", "[Start a new Chat]"),
        *(ChatMessage(role, text) for role, text in texts),
    ]


def as_sent(chat: Sequence[tuple[bool, str, str]] = CHAT) -> list[tuple[str, str]]:
    return [("user" if u else "assistant", text) for u, _, text in chat]


def asked(
    messages: list[ChatMessage], *, unsplit: tuple[str, ...] = (), merges: bool = False
) -> Asked:
    return Asked(messages, MARKERS, unsplit=unsplit, merges=merges)


def test_every_quirk_is_named_once_in_the_order_it_is_tried() -> None:
    lists = (REQUEST, HISTORY, MESSAGE, TEXT)
    names = [r.name for readings_ in lists for r in readings_]
    assert all(names) and len(names) == len(set(names))
    assert [r.read for r in REQUEST] == [readings._single, readings._as_it_came, readings._unmerged]
    assert HISTORY[0].read is readings._as_found  # the history as found before any other


def test_a_request_is_read_as_it_came_unless_it_is_one_unsplit_message() -> None:
    messages = request(*as_sent())
    index = chat_index()
    assert readings._as_it_came(asked(messages), index) == {}
    assert readings._as_it_came(asked(messages, unsplit=("Alex: hi",)), index) is None
    assert readings._single(asked(messages), index) is None


def test_a_single_messages_paragraphs_are_taken_apart_into_the_chats() -> None:
    chat = [f"{name}: {text}" for _, name, text in CHAT]
    messages = [ChatMessage("system", "Main."), ChatMessage("user", "\n\n".join(chat))]
    parts = readings._single(asked(messages, unsplit=tuple(chat)), chat_index())
    assert parts is not None and list(parts) == [1]  # the one message, by its index
    assert [(m.role, m.text) for m in parts[1]] == [
        ("user" if u else "assistant", line) for (u, _, _), line in zip(CHAT, chat, strict=True)
    ]


def test_merged_turns_are_taken_apart_only_where_the_format_merges() -> None:
    sent = as_sent()
    # Claude's turns: the user's message and ST's nudge after it joined into one.
    merged = request(*sent[:-1], ("user", sent[-1][1] + "\n\n[Write the next reply only.]"))
    index = chat_index()
    assert readings._unmerged(asked(merged), index) is None  # a format that never merges
    parts = readings._unmerged(asked(merged, merges=True), index)
    assert parts is not None and list(parts) == [len(merged) - 1]
    assert [m.text for m in parts[len(merged) - 1]] == [
        sent[-1][1],
        "[Write the next reply only.]",
    ]
    assert readings._unmerged(asked(request(*sent), merges=True), index) is None  # none merged


def ident(
    matched: int, history: tuple[int, ...], *, confidence: float = 1.0, changed: int = 0
) -> Identification:
    return Identification("c", confidence, "normal", 4, history, matched, history, changed)


def test_a_reading_is_whole_when_it_holds_every_message_as_it_is_and_the_last() -> None:
    span = HistorySpan(2, 6, (2, 3, 4, 5))
    assert readings.whole(ident(4, (2, 3, 4, 5)), span)
    assert not readings.whole(ident(3, (2, 3, 4)), span)  # the last one not among them
    assert not readings.whole(ident(4, (2, 3, 4, 5), changed=1), span)
    assert not readings.whole(ident(4, (2, 3, 4, 5), confidence=0.4), span)
    assert not readings.whole(None, span)
    # One reading beats another by the messages matched, then by holding the last one.
    assert readings.extent(ident(3, (2, 3, 4)), span) < readings.extent(ident(3, (3, 4, 5)), span)
    assert readings.extent(None, span) < readings.extent(ident(0, ()), span)


def test_the_history_without_its_last_message_when_no_chat_holds_that_one() -> None:
    messages = request(*as_sent(), ("user", "[OOC: keep it short]"))
    span = find_history(messages, MARKERS)
    known = {fingerprint(text) for _, _, text in CHAT}
    fps = {i: fingerprint(messages[i].text) for i in span.indices}
    shorter = readings._before_prompt(messages, span, fps, known)
    assert shorter == HistorySpan(span.start, span.indices[-1], span.indices[:-1])
    assert readings._before_prompt(messages, shorter, fps, known) is None  # a chat's last
    alone = HistorySpan(span.start, span.end, span.indices[-1:])
    assert readings._before_prompt(messages, alone, fps, known) is None  # nothing before it
    found = match.identify(messages, span, chat_index())
    assert found is not None and found.matched == len(CHAT) and found.generation == "normal"


def test_a_changed_message_stands_for_its_file_message() -> None:
    sent = as_sent()
    changed = request(*sent[:2], ("assistant", sent[2][1] + " <status>HP 9</status>"), sent[3])
    found = match.identify(changed, find_history(changed, MARKERS), chat_index())
    assert found is not None and (found.matched, found.changed) == (3, 1)
    assert found.confidence == 1.0 and found.history == (2, 3, 4, 5)


def test_a_reply_is_printed_without_its_reasoning() -> None:
    sent = as_sent()
    thought = "<think>\nShe should answer.\n</think>\n\n"
    messages = request(*sent[:2], ("assistant", thought + sent[2][1]), sent[3])
    span = find_history(messages, MARKERS)
    index = chat_index()
    index.reasoning = (DEFAULT_REASONING,)
    assert match.prints(messages, span, index).fps[4] == fingerprint(sent[2][1])
    found = match.identify(messages, span, index)
    assert found is not None and (found.matched, found.changed) == (4, 0)


def shouted(
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    fps: dict[int, int],
    tail: Sequence[IndexedMessage],
    r: int,
    f: int,
) -> int:
    """A quirk for the test: a script that writes a reply in capitals."""
    text = messages[history[r]].text
    return int(text.isupper() and fingerprint(text.lower()) in {fp for fp in tail[f].fps})


def test_a_new_message_reading_is_tried_by_the_matcher_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = as_sent()
    lower = [(False, n, t.lower()) if not u else (u, n, t) for u, n, t in CHAT]
    loud = request(*[(role, t.upper() if role == "assistant" else t) for role, t in as_sent(lower)])
    span = find_history(loud, MARKERS)
    index = chat_index(lower)
    before = match.identify(loud, span, index)
    assert before is None or before.matched < len(sent)
    monkeypatch.setattr(match, "MESSAGE", (*MESSAGE, Reading("in capitals", shouted)))
    found = match.identify(loud, span, index)
    assert found is not None and (found.matched, found.changed) == (2, 2)


def test_a_new_text_reading_is_tried_when_printing(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = as_sent()
    messages = request(*sent[:2], ("assistant", "(edited) " + sent[2][1]), sent[3])
    span = find_history(messages, MARKERS)

    def unedited(text: str, formats: object, known: Container[int]) -> int | None:
        found = fingerprint(text.removeprefix("(edited) "))
        return found if found in known else None

    monkeypatch.setattr(match, "TEXT", (*TEXT, Reading("unedited", unedited)))
    found = match.identify(messages, span, chat_index())
    assert found is not None and (found.matched, found.changed) == (4, 0)
