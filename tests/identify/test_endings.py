"""What ST's prompts after the chat history tell of a request: a continue, the group's
next speaker, an impersonation, a prefill of the reply it continues."""

from __future__ import annotations

from unittest.mock import patch

from proxy.core.fingerprints import index_message
from proxy.core.models import ChatMessage
from proxy.identify.endings import continues, impersonating, nudged, opened, prefilled, starts
from proxy.identify.reasoning import DEFAULT_REASONING

LAST = index_message(4, False, "Seraphina", "Once upon a time, in Eldoria, the river woke.")
NUDGE = "[Continue your last message without repeating its original content.]"


def system(text: str) -> ChatMessage:
    return ChatMessage("system", text)


def test_the_continue_nudge_on_its_own_or_as_a_line_of_sts_joined_prompts() -> None:
    assert continues([system(NUDGE)], LAST, ())
    assert continues([ChatMessage("user", NUDGE)], LAST, ())  # Claude's turns are the user's
    # ST's "squash system messages" joins it to the prompts before it.
    assert continues([system(f"[Author's note: rain.]\n{NUDGE}")], LAST, ())
    # A line that starts alike inside other instructions is no nudge; nor the reply's.
    assert not continues([system("Rules:\n[Continue the story in the present tense.]")], LAST, ())
    assert not continues([ChatMessage("assistant", NUDGE)], LAST, ())


def test_a_prefill_is_the_start_of_the_last_reply() -> None:
    assert prefilled([ChatMessage("assistant", "Once upon  a time,")], LAST, ())
    assert prefilled([ChatMessage("assistant", "Seraphina: Once upon a time,")], LAST, ())
    assert not prefilled([ChatMessage("assistant", "Long ago,")], LAST, ())
    assert not prefilled([ChatMessage("assistant", "   ")], LAST, ())
    thought = "<think>\nGo on.\n</think>\n\nOnce upon a time,"
    assert prefilled([ChatMessage("assistant", thought)], LAST, (DEFAULT_REASONING,))
    assert not prefilled([ChatMessage("assistant", thought)], LAST, ())
    # Reasoning with nothing after it is not the reply's start.
    empty = "<think>\nGo on.\n</think>\n\n"
    assert not starts(LAST, empty, (DEFAULT_REASONING,))


def test_a_text_prompts_last_line_taken_for_sts_own_is_the_prefill_it_is() -> None:
    """A group member's continued reply, the last line of a text prompt with instruct off,
    whose name starts no other turn (so the line read as one of ST's prompts): the
    request's very end, named, and the file's reply starts with it."""
    assert prefilled([system(NUDGE), system("Orin: Once upon a time,")], LAST, ())
    # Not one before the end, not one without a name, not a reply it does not start.
    assert not prefilled([system("Orin: Once upon a time,"), system(NUDGE)], LAST, ())
    assert not prefilled([system("Once upon a time,")], LAST, ())
    assert not prefilled([system("Orin: Long ago,")], LAST, ())
    # The reply's lines after its first (its reasoning's, a paragraph's) read as more of
    # ST's prompts: from the named one on, they are the reply's start.
    lines = ["Orin: <think>", "Go on.", "</think>", "", "Once upon a time,"]
    assert prefilled([system(line) for line in lines], LAST, (DEFAULT_REASONING,))
    assert not prefilled([system(line) for line in lines[1:]], LAST, (DEFAULT_REASONING,))
    # Not past a prompt of several lines, which is ST's own (not read whole).
    ruled = [system("Orin: Once upon a time,"), system("[Rules]\nBe brief."), system("go")]
    with patch("proxy.identify.endings.starts", return_value=True) as compared:
        assert not prefilled(ruled, LAST, ())
    assert not compared.called


def test_the_group_nudge_the_open_turns_and_the_impersonation() -> None:
    assert nudged([system("[Write the next reply only as Orin.]")])
    assert not nudged([system("[Start a new group chat. Group members: Orin, Seraphina]")])
    # A text prompt's open turn: the character's (a new reply), the user's (impersonation).
    assert opened([ChatMessage("assistant", "", "Orin")])
    assert not opened([ChatMessage("assistant", "", None)])
    assert impersonating([ChatMessage("user", "", "Alex")])
    prompt = "[Write your next reply from the point of view of Alex, using the chat history]"
    assert impersonating([system(prompt)])
    assert impersonating([system(f"[Stay in character.]\n{prompt}")])
    assert not impersonating([system("[Write a summary of the chat.]")])
