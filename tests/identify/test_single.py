"""ST's single user message read as the chat it holds: which paragraphs start a message,
whose it is, and where a reply a regex script changed ends (`proxy.identify.single`)."""

from __future__ import annotations

import json
from typing import Any

from adapters.base import ParsedRequest
from adapters.openai_chat import OpenAIChatAdapter
from adapters.single import SingleLayout
from proxy.core.fingerprints import IndexedMessage, index_message
from proxy.core.models import ChatMessage
from proxy.core.placement import find_history
from proxy.identify.chat_index import TEXT_KEPT, ChatEntry, ChatIndex
from proxy.identify.single import read_single
from tests.adapters.captures import MARKERS
from tests.adapters.edits import layout_of

ADAPTER = OpenAIChatAdapter()


class CountedLookups(dict[int, tuple[str, ...]]):
    """The index's fingerprint map, counting the lookups of a message's chats."""

    looked = 0

    def get(self, key: int, default: Any = None) -> Any:
        self.looked += 1
        return super().get(key, default)


def split_with(chat: list[str], index: ChatIndex) -> ParsedRequest:
    """A single user message of ST's prompts and these chat paragraphs, read and taken
    apart with `index`."""
    text = "\n\n".join(["Main.", "[Start a new Chat]", *chat])
    parsed = ADAPTER.parse(json.dumps({"messages": [{"role": "user", "content": text}]}).encode())
    layout = layout_of(parsed, SingleLayout)
    assert layout.unsplit
    parsed.messages = read_single(parsed.messages[:-1], layout.unsplit, index)
    parsed.layout = SingleLayout(())  # taken apart: nothing left unsplit
    return parsed


def test_a_speaker_is_a_name_the_index_holds_a_message_of() -> None:
    """A paragraph of a message that starts like a speaker's (`Note: `) stays the
    message's; the user is told from a reply by the index, not by the order."""
    index = ChatIndex()
    tail = [
        index_message(0, False, "Ava", "Welcome.\n\nNote: the door creaks."),
        index_message(1, True, "Tom", "Thanks."),
    ]
    index.put(ChatEntry("c", 0.0, 2, tail))
    parsed = split_with(["Ava: Welcome.", "Note: the door creaks.", "Tom: Thanks."], index)
    assert parsed.messages[2:] == [
        ChatMessage("assistant", "Ava: Welcome.\n\nNote: the door creaks."),
        ChatMessage("user", "Tom: Thanks."),
    ]
    assert find_history(parsed.messages, MARKERS).indices == (2, 3)


def test_a_reply_that_writes_a_speakers_line_stays_one_message() -> None:
    """A paragraph of a reply that starts with a speaker's `Name: ` (the model wrote the
    user's line, or its own speaker's) does not split the reply when the index holds the
    whole: not in the history, nor in the newest reply, a continue's, whose nudge after it
    stays ST's."""
    index = ChatIndex()
    letter = "She reads the letter aloud.\n\nTom: I will come home soon.\n\nShe folds it."
    tail = [
        index_message(0, False, "Ava", letter),
        index_message(1, True, "Tom", "Thanks."),
        index_message(2, False, "Ava", "Go on.\n\nAva: And so I did."),
    ]
    index.put(ChatEntry("c", 0.0, 3, tail))
    nudge = "[Continue your last message without repeating its original content.]"
    chat = [
        "Ava: She reads the letter aloud.",
        "Tom: I will come home soon.",
        "She folds it.",
        "Tom: Thanks.",
        "Ava: Go on.",
        "Ava: And so I did.",
        nudge,
    ]
    parsed = split_with(chat, index)
    assert parsed.messages[2:] == [
        ChatMessage("assistant", "Ava: " + letter),
        ChatMessage("user", "Tom: Thanks."),
        ChatMessage("assistant", "Ava: Go on.\n\nAva: And so I did."),
        ChatMessage("system", nudge),
    ]
    # Two replies the index holds neither of (changed on their way) stay two.
    parsed = split_with(["Tom: Thanks.", "Ava: Hm.", "Ava: Then."], index)
    assert [m.text for m in parsed.messages[2:]] == ["Tom: Thanks.", "Ava: Hm.", "Ava: Then."]


def test_a_reply_a_regex_script_changed_is_still_told_a_reply() -> None:
    """A status block cut off every reply: no reply is held by the index as it is. The
    user's are, which find the chat; its newest replies start as the request's do. And
    ST's nudge after the changed newest reply is ST's, not the reply's."""
    index = ChatIndex()
    tail = [
        index_message(0, False, "Ava", "Welcome. <status>HP 5</status>"),
        index_message(1, True, "Tom", "Thanks."),
        index_message(2, False, "Ava", "Go on, then. <status>HP 4</status>"),
    ]
    index.put(ChatEntry("c", 0.0, 3, tail))
    nudge = "[Continue your last message without repeating its original content.]"
    parsed = split_with(["Ava: Welcome.", "Tom: Thanks.", "Ava: Go on, then.", nudge], index)
    assert parsed.messages[2:] == [
        ChatMessage("assistant", "Ava: Welcome."),
        ChatMessage("user", "Tom: Thanks."),
        ChatMessage("assistant", "Ava: Go on, then."),
        ChatMessage("system", nudge),
    ]


def test_a_changed_reply_that_writes_the_users_lines_stays_one_message() -> None:
    """A reply whose status block a regex script cut (no join of its parts is a message
    the index holds), which writes the user's lines as `Tom: ` three times, continued: one
    reply, as the file has it, then ST's nudge (hunt seed 5928: the request had no chat).
    A line of the user's that the index holds as a message of its own is the user's."""
    index = ChatIndex()
    reply = (
        "She reads.\n\nTom: Come home.\n\nShe nods. <status>HP 5</status> She goes on."
        "\n\nTom: Soon.\n\nShe smiles.\n\nTom: Now.\n\nShe leaves."
    )
    tail = [index_message(0, True, "Tom", "Thanks."), index_message(1, False, "Ava", reply)]
    index.put(ChatEntry("c", 0.0, 2, tail))
    nudge = "[Continue your last message without repeating its original content.]"
    sent = ["She reads.", "Tom: Come home.", "She nods. She goes on.", "Tom: Soon.",
            "She smiles.", "Tom: Now.", "She leaves."]  # fmt: skip
    parsed = split_with(["Tom: Thanks.", "Ava: " + sent[0], *sent[1:], nudge], index)
    assert parsed.messages[2:] == [
        ChatMessage("user", "Tom: Thanks."),
        ChatMessage("assistant", "Ava: " + "\n\n".join(sent)),
        ChatMessage("system", nudge),
    ]
    # The user's message after it, held by the index, that says what a quoted line did.
    index.put(ChatEntry("c", 1.0, 3, [*tail, index_message(2, True, "Tom", "Now.")]))
    parsed = split_with(["Tom: Thanks.", "Ava: " + sent[0], *sent[1:], "Tom: Now."], index)
    assert [m.role for m in parsed.messages[2:]] == ["user", "assistant", "user"]
    assert parsed.messages[-1] == ChatMessage("user", "Tom: Now.")


def test_a_branchs_changed_replies_are_told_by_the_branch_not_its_parent() -> None:
    """A branch shares its parent's older messages. The user's line that tells the user
    a speaker is held by both, the parent first, which keeps the texts of its newest
    messages only: the replies, each with its status block cut off, start as the
    branch's do, where they are the newest."""

    def line(n: int) -> IndexedMessage:
        if n % 2:
            return index_message(n, True, "Tom", f"Line {n}.")
        return index_message(n, False, "Ava", f"Line {n}. <status>HP {n}</status>")

    index = ChatIndex()
    later = [index_message(n, n % 2 == 1, "Ava", f"Later {n}.") for n in range(4, 4 + TEXT_KEPT)]
    index.put(ChatEntry("parent", 1.0, 4 + TEXT_KEPT, [line(n) for n in range(4)] + later))
    index.put(ChatEntry("branch", 2.0, 4, [line(n) for n in range(4)]))
    parsed = split_with(["Ava: Line 0.", "Tom: Line 1.", "Ava: Line 2.", "Tom: Line 3."], index)
    roles = [m.role for m in parsed.messages[2:]]
    assert roles == ["assistant", "user", "assistant", "user"]


def test_a_changed_reply_ends_before_the_group_nudge_and_what_follows_it() -> None:
    """A group's changed newest reply (its status block cut off), then ST's group nudge
    and the user's post-history instructions after it, each a paragraph: both ST's."""
    index = ChatIndex()
    tail = [
        index_message(0, True, "Tom", "Hello there."),
        index_message(1, False, "Ava", "Welcome, traveller. <status>HP 5</status>"),
    ]
    index.put(ChatEntry("c", 0.0, 2, tail))
    after = ["[Write the next reply only as Orin.]", "[Stay in character.]"]
    parsed = split_with(["Tom: Hello there.", "Ava: Welcome, traveller.", *after], index)
    assert parsed.messages[2:] == [
        ChatMessage("user", "Tom: Hello there."),
        ChatMessage("assistant", "Ava: Welcome, traveller."),
        *[ChatMessage("system", text) for text in after],
    ]


def test_a_name_is_looked_for_in_its_newest_paragraphs_only() -> None:
    """300 messages, every reply changed on its way (none held as it is): telling who
    speaks costs a request a few lookups a name, not a dozen for each of its paragraphs
    (the whole history's, which the index does not hold: 60 ms a request)."""
    index = ChatIndex()
    tail = [
        index_message(
            n, bool(n % 2), "Tom" if n % 2 else "Ava", f"Line {n}." + " <s/>" * (1 - n % 2)
        )
        for n in range(300)
    ]
    index.put(ChatEntry("c", 0.0, 300, tail))
    counted = CountedLookups(index.by_fp)
    index.by_fp = counted
    chat = [f"{'Tom' if n % 2 else 'Ava'}: Line {n}." for n in range(300)]
    parsed = split_with(chat, index)
    roles = [m.role for m in parsed.messages[2:]]
    assert roles == ["user" if n % 2 else "assistant" for n in range(300)]
    assert counted.looked <= 100  # Ava's 4 newest, a dozen joins each; Tom's first
