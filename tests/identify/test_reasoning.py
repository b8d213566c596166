"""Reasoning ST writes before a reply's text: found and taken off, and the requests that
carry it identified as the chats and kinds they are."""

from __future__ import annotations

from proxy.core.models import ChatMessage
from proxy.core.placement import find_history
from proxy.identify.chat_index import ChatIndex
from proxy.identify.match import prints
from proxy.identify.reasoning import (
    DEFAULT_REASONING,
    ReasoningFormat,
    reasoning_format,
    without_reasoning,
)
from tests.identify.test_match import MARKERS, entry, request, run

THINKING = ReasoningFormat("<thinking>", "</thinking>", "\n")
FORMATS = (THINKING, DEFAULT_REASONING)


def wrapped(text: str, thought: str, form: ReasoningFormat = DEFAULT_REASONING) -> str:
    """A reply as ST sends it with its reasoning (`PromptReasoning.addToMessage`)."""
    return f"{form.prefix}{thought}{form.suffix}{form.separator}{text}"


def test_the_settings_of_a_reasoning_template() -> None:
    deepseek = {"prefix": "<think>\n", "suffix": "\n</think>", "separator": "\n\n"}
    assert reasoning_format(deepseek) == DEFAULT_REASONING
    assert reasoning_format({"prefix": "<thinking>", "suffix": "</thinking>"}) == ReasoningFormat(
        "<thinking>", "</thinking>", "\n\n"
    )
    # ST's "Blank" template, or settings from before reasoning: nothing to tell it by.
    assert reasoning_format({"prefix": "", "suffix": "", "separator": "\n\n"}) is None
    assert reasoning_format({}) is None
    assert reasoning_format({"prefix": "<t>", "suffix": 3}) is None


def test_the_text_after_the_reasoning() -> None:
    text = "*She nods.* The river is cold."
    assert without_reasoning(wrapped(text, "She should agree."), FORMATS) == text
    assert without_reasoning(wrapped(text, "Agree.", THINKING), FORMATS) == text
    # A speaker's name before it (names in the content), kept.
    assert without_reasoning(f"Seraphina: {wrapped(text, 'Hm.')}", FORMATS) == f"Seraphina: {text}"
    # No separator (a user's template without one): the text follows the suffix.
    bare = ReasoningFormat("<think>\n", "\n</think>", "")
    assert without_reasoning(f"<think>\nHm.\n</think>{text}", (bare,)) == text
    # None: no reasoning, a prefix that is not the message's start, an unclosed one.
    assert without_reasoning(text, FORMATS) is None
    assert without_reasoning(f"She said:\nhi {wrapped(text, 'Hm.')}", FORMATS) is None
    assert without_reasoning(f"{'x' * 100}: {wrapped(text, 'Hm.')}", FORMATS) is None
    assert without_reasoning(f"<think>\nStill thinking about {text}", FORMATS) is None


TURNS = [
    (True, "Alex", "Tell me a story."),
    (False, "Seraphina", "Once upon a time, in Eldoria."),
    (True, "Alex", "Go on."),
    (False, "Seraphina", "The river spirits woke."),
]


def chat() -> ChatIndex:
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, TURNS))
    return index


def test_replies_sent_with_their_reasoning_are_the_chats_messages() -> None:
    """ "Add to Prompts" on: the newest replies carry their reasoning, and the request is
    still the chat's, told for the kind it is, every message of it matched."""
    index = chat()
    first = wrapped("Once upon a time, in Eldoria.", "A fairy tale, then.")
    last = wrapped("The river spirits woke.", "Go on with the river.")
    shown = [("user", "Tell me a story."), ("assistant", first), ("user", "Go on."),
             ("assistant", last)]  # fmt: skip
    # A new reply after the user's next message, saved before the request.
    index.put(entry("u/chats/S/c", 2.0, [*TURNS, (True, "Alex", "And then?")]))
    found = run(index, request(*shown, ("user", "And then?")))
    assert found is not None and (found.chat_id, found.generation) == ("u/chats/S/c", "normal")
    assert (found.matched, found.confidence, found.target_message) == (5, 1.0, 5)
    index = chat()
    # A swipe of the last reply: ST leaves it out, and the one before is the newest.
    found = run(index, request(*shown[:3]))
    assert found is not None and (found.generation, found.target_message) == ("swipe", 3)
    assert found.matched == 3
    # An impersonation after the reply is quiet, not a swipe of it.
    prompt = ("system", "[Write your next reply from the point of view of Alex.]")
    found = run(index, request(*shown, trailing=(prompt,)))
    assert found is not None and (found.generation, found.matched) == ("quiet", 4)


def test_a_continued_reply_always_carries_its_reasoning() -> None:
    """ST puts the reasoning of the reply a Continue goes on with into the prompt even
    with "Add to Prompts" off: the request is a continue of that reply."""
    index = chat()
    head = [("user", "Tell me a story."), ("assistant", "Once upon a time, in Eldoria."),
            ("user", "Go on.")]  # fmt: skip
    last = wrapped("The river spirits woke.", "Go on with the river.")
    nudge = ("system", "[Continue your last message without repeating its original content.]")
    partial = wrapped("The river", "Go on with the river.")
    for messages, matched in (
        (request(*head, ("assistant", last), trailing=(nudge,)), 4),  # ST's nudge
        (request(*head, trailing=(("assistant", last),)), 3),  # the prefill, after the history
        (request(*head, trailing=(("assistant", partial),)), 3),  # a part of it
    ):
        found = run(index, messages)
        assert found is not None, messages
        assert (found.generation, found.target_message, found.matched) == ("continue", 3, matched)


def test_a_swipe_after_two_replies_whose_first_carries_its_reasoning() -> None:
    index = ChatIndex()
    turns = [*TURNS[:2], (False, "Seraphina", "The river spirits woke.")]
    index.put(entry("u/chats/S/c", 1.0, turns))
    first = wrapped("Once upon a time, in Eldoria.", "A fairy tale.")
    found = run(index, request(("user", "Tell me a story."), ("assistant", first)))
    assert found is not None
    assert (found.generation, found.target_message, found.matched) == ("swipe", 2, 2)


def test_a_reply_that_holds_its_own_thinking_is_matched_as_it_came() -> None:
    """ST's auto-parse off: the model's `<think>` block stays in the reply's text, and the
    request carries it as saved. Taken off, the text would match nothing."""
    index = ChatIndex()
    own = wrapped("Once upon a time, in Eldoria.", "A fairy tale.")
    index.put(entry("u/chats/S/c", 1.0, [TURNS[0], (False, "Seraphina", own), TURNS[2]]))
    found = run(
        index, request(("user", "Tell me a story."), ("assistant", own), ("user", "Go on."))
    )
    assert found is not None and (found.generation, found.matched) == ("normal", 3)
    # Continued: the reply as saved, its thinking and all, is the prefill.
    messages = request(("user", "Tell me a story."), trailing=(("assistant", own[:30]),))
    index.put(entry("u/chats/S/c", 2.0, [TURNS[0], (False, "Seraphina", own)]))
    found = run(index, messages)
    assert found is not None and (found.generation, found.target_message) == ("continue", 1)


def test_a_users_own_reasoning_template() -> None:
    index = chat()
    index.reasoning = FORMATS
    last = wrapped("The river spirits woke.", "Go on with the river.", THINKING)
    shown = [("user", "Tell me a story."), ("assistant", "Once upon a time, in Eldoria."),
             ("user", "Go on."), ("assistant", last)]  # fmt: skip
    impersonate = ("system", "[Write your next reply from the point of view of Alex.]")
    found = run(index, request(*shown, trailing=(impersonate,)))
    assert found is not None and (found.generation, found.matched) == ("quiet", 4)
    # Another template's markers are not taken off: the reply is then one of ST's prompts.
    index.reasoning = (DEFAULT_REASONING,)
    found = run(index, request(*shown, trailing=(impersonate,)))
    assert found is not None and found.matched == 3


def test_messages_are_printed_bare_only_where_that_matches() -> None:
    """The request's newest message, unsaved yet, whose text holds a `<think>` block of
    the model's own: printed as it came (the file will hold it so), not without it."""
    index = chat()
    own = wrapped("Hello there.", "Greet.")
    start, user = ChatMessage("system", "[Start a new Chat]"), ChatMessage("user", "Hi.")
    messages = [start, ChatMessage("assistant", own), user]
    printed = prints(messages, find_history(messages, MARKERS), index)
    assert printed.fps[1] == hash(" ".join(own.split()))
    known = [start, ChatMessage("assistant", wrapped("The river spirits woke.", "Hm.")), user]
    printed = prints(known, find_history(known, MARKERS), index)
    assert printed.fps[1] == hash("The river spirits woke.")
