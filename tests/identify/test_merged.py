"""Turns ST merged for Claude, taken apart by the chat messages they hold."""

from __future__ import annotations

from proxy.core.fingerprints import fingerprint
from proxy.core.models import ChatMessage, HistorySpan
from proxy.identify.merged import MAX_PARAGRAPHS, unmerged

FILE = [
    "Ava greets Tom at the gate.",
    "Tom asks about the mill.",
    "Ava points north.\n\nShe says the mill burned down years ago.",  # two paragraphs
    "Tom thanks her.",
    "Tom asks again, louder.",
]
KNOWN = {fingerprint(text) for text in FILE} | {fingerprint(f"Orin: {FILE[0]}")}
HEAD = [ChatMessage("system", "Write Ava's reply."), ChatMessage("system", "[Start a new Chat]")]


def split(
    *turns: tuple[str, str], prompts_in_replies: bool = True
) -> dict[int, list[tuple[str, str]]]:
    messages = [*HEAD, *(ChatMessage(role, text) for role, text in turns)]
    span = HistorySpan(2, len(messages), tuple(range(2, len(messages))))
    found = unmerged(messages, span, KNOWN, prompts_in_replies=prompts_in_replies)
    return {i: [(p.role, p.text) for p in parts] for i, parts in found.items()}


def test_two_user_messages_in_a_row_are_two_again() -> None:
    assert split(("assistant", FILE[0]), ("user", f"{FILE[3]}\n\n{FILE[4]}")) == {
        3: [("user", FILE[3]), ("user", FILE[4])]
    }


def test_a_message_of_several_paragraphs_stays_whole() -> None:
    assert split(("user", FILE[1]), ("assistant", FILE[2]), ("user", FILE[3])) == {}
    merged = f"{FILE[2]}\n\n{FILE[0]}"  # the long one merged with another reply
    assert split(("user", FILE[1]), ("assistant", merged), ("user", FILE[3])) == {
        3: [("assistant", FILE[2]), ("assistant", FILE[0])]
    }


def test_st_prompts_between_and_after_chat_messages_are_system_messages() -> None:
    note = "[Author's note: it rains.]\n\n[Keep it short.]"
    nudge = "[Write the next reply only as Ava.]"
    notes = [("system", "[Author's note: it rains.]"), ("system", "[Keep it short.]")]
    assert split(("assistant", FILE[0]), ("user", f"{FILE[3]}\n\n{note}\n\n{FILE[4]}")) == {
        3: [("user", FILE[3]), *notes, ("user", FILE[4])]
    }
    assert split(("assistant", FILE[0]), ("user", f"{FILE[4]}\n\n{nudge}")) == {
        3: [("user", FILE[4]), ("system", nudge)]
    }
    # A group member's reply carries its name.
    assert split(("assistant", f"Orin: {FILE[0]}\n\n{FILE[2]}"), ("user", FILE[3])) == {
        2: [("assistant", f"Orin: {FILE[0]}"), ("assistant", FILE[2])]
    }


def test_a_reply_st_changed_in_a_merged_turn_stays_a_reply_where_prompts_join_no_reply() -> None:
    """Claude, a post-processed prompt: ST's prompts are the user's (or the system's),
    so what of a merged reply turn is no chat message as it is is a reply ST changed (a
    status block cut), not a prompt; not so for the newest message, which ST's prefill
    may follow."""
    changed = "Orin nods and waits by the gate."  # no chat holds it as it came
    turns = (("user", FILE[1]), ("assistant", f"{FILE[0]}\n\n{changed}"), ("user", FILE[3]))
    assert split(*turns, prompts_in_replies=False) == {
        3: [("assistant", FILE[0]), ("assistant", changed)]
    }
    assert split(*turns) == {3: [("assistant", FILE[0]), ("system", changed)]}  # instruct off
    newest = (("user", FILE[1]), ("assistant", f"{FILE[0]}\n\n{changed}"))
    assert split(*newest, prompts_in_replies=False) == {
        3: [("assistant", FILE[0]), ("system", changed)]
    }


def test_a_last_user_turn_no_chat_holds_is_sts_prompt() -> None:
    # ST 1.13's continue nudge, or its impersonation prompt, on a turn of its own.
    nudge = "[Continue your last message without repeating its original content.]"
    assert split(("user", FILE[1]), ("assistant", FILE[0]), ("user", nudge)) == {
        4: [("system", nudge)]
    }
    # Merged with others (a group's continue, an Author's Note): one message each, so
    # that each nudge is told by how it starts.
    group = "[Write the next reply only as Ava.]"
    assert split(("assistant", FILE[0]), ("user", f"{group}\n\n{nudge}")) == {
        3: [("system", group), ("system", nudge)]
    }
    # Not so before the end (one of ST's injections, skipped as it is), nor a reply.
    assert split(("user", nudge), ("assistant", FILE[0]), ("user", FILE[3])) == {}
    assert split(("user", FILE[3]), ("assistant", "Ava's reply no file holds.")) == {}


def test_nothing_known_in_a_turn_leaves_it_as_it_came() -> None:
    assert split(("user", "Something new.\n\nAnd more."), ("assistant", FILE[0])) == {}
    many = "\n\n".join([FILE[3]] * (MAX_PARAGRAPHS + 1))
    assert split(("user", many), ("assistant", FILE[0])) == {}


def test_lines_of_a_text_prompt_with_instruct_off() -> None:
    # A line without a name (ST's note, a narrator message) joins the message before it.
    messages = [*HEAD, ChatMessage("user", f"{FILE[3]}\n[Author's note: it rains.]", "Tom")]
    span = HistorySpan(2, 3, (2,))
    parts = unmerged(messages, span, KNOWN, "\n")
    assert parts == {
        2: [
            ChatMessage("user", FILE[3], "Tom"),
            ChatMessage("system", "[Author's note: it rains.]"),
        ]
    }
