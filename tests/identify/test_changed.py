"""Messages ST changed on their way into a request: when a request message is still the
file message it stands for, and when it is one of ST's own prompts."""

from __future__ import annotations

from proxy.core.fingerprints import IndexedMessage, fingerprint, index_message
from proxy.core.models import ChatMessage
from proxy.identify.changed import (
    CHANGED_RUN,
    alike,
    bare_print,
    before_last,
    is_changed,
    merged_run,
    sided,
)
from proxy.identify.reasoning import DEFAULT_REASONING

REPLY = "The river bends west at the old mill, she says, and the lanterns go out."
ASKED = "Alex asks about the road to the mill and who keeps it."


def message(position: int, is_user: bool, text: str, *, keep: bool = True) -> IndexedMessage:
    indexed = index_message(position, is_user, "Alex" if is_user else "Seraphina", text)
    # Past the newest `TEXT_KEPT` of a chat, the index holds the fingerprints alone.
    return indexed if keep else IndexedMessage(position, is_user, "", indexed.fps)


def test_a_file_message_that_holds_the_start_or_the_end_of_the_request_text() -> None:
    filed = message(0, False, REPLY + " <status>HP 3</status>")
    assert alike(REPLY, filed, ())  # its start
    assert alike("[Day 3] " + REPLY[10:], filed, ())  # its end
    assert alike("Seraphina: " + REPLY, filed, ())  # past the speaker's name
    thought = "<think>\nOn with it.\n</think>\n\n"
    assert alike(thought + REPLY, filed, (DEFAULT_REASONING,))
    assert not alike("[Author's note: it rains all day long in Eldoria.]", filed, ())
    assert not alike(REPLY, message(0, False, REPLY, keep=False), ())  # no text kept


def test_the_side_of_a_request_message_is_its_files() -> None:
    assert sided("user", message(0, True, ASKED))
    assert sided("assistant", message(0, False, REPLY))
    assert not sided("system", message(0, False, REPLY))
    assert not sided("user", message(0, False, REPLY))


def test_the_print_without_reasoning() -> None:
    known = {fingerprint(REPLY)}
    assert bare_print("<think>\nHm.\n</think>\n\n" + REPLY, (DEFAULT_REASONING,), known) is not None
    assert bare_print(REPLY, (DEFAULT_REASONING,), known) is None  # no reasoning to take off


def run_of_changed(count: int) -> tuple[list[ChatMessage], list[int], list[IndexedMessage]]:
    """A user's message, then `count` replies in a row whose status blocks ST's prompt
    left out, none of their texts kept by the index (older than `TEXT_KEPT`)."""
    replies = [f"{REPLY} Time {i}." for i in range(count)]
    tail = [message(0, True, ASKED, keep=False)] + [
        message(1 + i, False, f"{r} <status>HP {i}</status>", keep=False)
        for i, r in enumerate(replies)
    ]
    requested = [ChatMessage("user", ASKED), *(ChatMessage("assistant", r) for r in replies)]
    return requested, list(range(len(requested))), tail


def test_changed_replies_in_a_row_are_taken_on_the_messages_before_them() -> None:
    requested, history, tail = run_of_changed(CHANGED_RUN)
    fps = {i: fingerprint(m.text) for i, m in enumerate(requested)}
    for r in range(1, len(requested)):
        assert is_changed(requested, history, fps, tail, r, r)
    # One more than that in a row: the newest is not taken on them alone.
    requested, history, tail = run_of_changed(CHANGED_RUN + 1)
    fps = {i: fingerprint(m.text) for i, m in enumerate(requested)}
    assert not is_changed(requested, history, fps, tail, CHANGED_RUN + 1, CHANGED_RUN + 1)
    # ST's prompt of another side between them (an Author's Note) breaks the run.
    note = ChatMessage("system", "[Author's note: it rains.]")
    noted = [*requested[:2], note, *requested[3:]]
    assert not is_changed(noted, history, fps, tail, 2, 2)


def test_the_last_reply_but_one_and_a_turn_that_holds_both() -> None:
    first, second = REPLY, "Then the lanterns go out, one by one, along the river."
    tail = [message(0, False, first + " <status>HP 1</status>"), message(1, False, second)]
    assert before_last(ChatMessage("assistant", first), tail, ())
    assert not before_last(ChatMessage("user", first), tail, ())
    # ST merged both for Claude: the turn starts as the first does, but is both.
    assert not before_last(ChatMessage("assistant", f"{first}\n\n{second}"), tail, ())
    # A single user message, swiped after two replies in a row: the one before ends it,
    # its name and reasoning before it and the post-history instructions after it
    # (hunted seed 4036: no chat ended as the request did).
    thought = "<think>\nShe should warn him.\n</think>\n\n"
    said = f"Seraphina: {thought}{first}\n\n[Stay in character; write vividly.]"
    assert before_last(ChatMessage("assistant", said), tail, (DEFAULT_REASONING,))
    assert not before_last(ChatMessage("assistant", said), tail, ())


Merged = tuple[list[ChatMessage], list[int], dict[int, int], list[IndexedMessage]]


def merged_replies(count: int, *, keep: bool) -> Merged:
    """The user's message, then `count` replies in a row (a group's members), each with a
    status block ST's prompt left out, sent merged into one turn (Claude)."""
    replies = [f"Seraphina: Time {i}. {REPLY}" for i in range(count)]
    tail = [message(0, True, ASKED)] + [
        message(1 + i, False, f"{r[11:]} <status>HP {i}</status>", keep=keep)
        for i, r in enumerate(replies)
    ]
    requested = [ChatMessage("user", ASKED), ChatMessage("assistant", "\n\n".join(replies))]
    fps = {i: fingerprint(m.text) for i, m in enumerate(requested)}
    return requested, [0, 1], fps, tail


def test_a_turn_merged_from_changed_replies_stands_for_all_of_them() -> None:
    for count in range(2, CHANGED_RUN + 1):
        for keep in (True, False):  # by the message before, the texts kept or not
            requested, history, fps, tail = merged_replies(count, keep=keep)
            assert merged_run(requested, history, fps, tail, 1, count) == count - 1
        # With no message before it: by the first reply's text, where the index keeps it.
        alone = requested[1:]
        printed = {0: fingerprint(alone[0].text)}
        assert merged_run(alone, [0], printed, tail, 0, count) == 0  # texts not kept
        _, _, _, kept = merged_replies(count, keep=True)
        assert merged_run(alone, [0], printed, kept, 0, count) == count - 1
    # More than `CHANGED_RUN` merged: not taken by their texts, nor by the message before.
    for keep in (True, False):
        requested, history, fps, tail = merged_replies(CHANGED_RUN + 1, keep=keep)
        assert merged_run(requested, history, fps, tail, 1, CHANGED_RUN + 1) == 0


def test_a_changed_message_that_is_one_message_is_no_run() -> None:
    requested, history, fps, tail = merged_replies(2, keep=True)
    # One reply of several paragraphs, the message before it the file's before it.
    single = [requested[0], ChatMessage("assistant", f"{REPLY}\n\nShe waits.")]
    filed = [tail[0], message(1, False, f"{REPLY}\n\nShe waits. <status>HP 1</status>")]
    assert merged_run(single, history, fps, filed, 1, 1) == 0
    # Without a blank line, no merge: ST joins what it merges with one.
    joined = [requested[0], ChatMessage("assistant", requested[1].text.replace("\n\n", " "))]
    assert merged_run(joined, history, fps, tail, 1, 2) == 0
    # Not of the file message's side (ST's prompt, or the user's).
    asked = [requested[0], ChatMessage("user", requested[1].text)]
    assert merged_run(asked, history, fps, tail, 1, 2) == 0
    # A turn that starts as the message it stands for starts no run before it, though an
    # earlier reply starts alike.
    alike_starts = [message(i, False, f"{REPLY} Time {i}. <status>HP {i}</status>") for i in (0, 1)]
    own = [ChatMessage("assistant", f"{REPLY} Time 1.\n\n[Author's note: it rains.]")]
    assert merged_run(own, [0], {0: fingerprint(own[0].text)}, alike_starts, 0, 1) == 0
