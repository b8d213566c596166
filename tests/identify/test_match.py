"""Identification over a hand-made index: ties, quiet requests, names in content, macros."""

from __future__ import annotations

import random

import pytest

import proxy.identify.match as module
from proxy.core.fingerprints import fingerprint, index_message, message_fingerprint
from proxy.core.models import ChatMessage
from proxy.core.placement import find_history
from proxy.identify.chat_index import ChatEntry, ChatIndex
from proxy.identify.match import identify

MARKERS = ("[Start a new Chat]", "[Start a new group chat")
GREETING = "*You wake in a glade.* Welcome, {{user}}."


def entry(chat_id: str, updated: float, texts: list[tuple[bool, str, str]]) -> ChatEntry:
    tail = [
        index_message(i, is_user, name, text, char="Seraphina", user="Alex")
        for i, (is_user, name, text) in enumerate(texts)
    ]
    return ChatEntry(chat_id, updated, len(texts), tail, name=chat_id.rsplit("/", 1)[-1])


def request(
    *turns: tuple[str, str], trailing: tuple[tuple[str, str], ...] = ()
) -> list[ChatMessage]:
    return [
        ChatMessage("system", "Write Seraphina's next reply."),
        ChatMessage("system", "[Start a new Chat]"),
        *(ChatMessage(role, text) for role, text in turns),
        *(ChatMessage(role, text) for role, text in trailing),
    ]


def run(index: ChatIndex, messages: list[ChatMessage]):  # type: ignore[no-untyped-def]
    return identify(messages, find_history(messages, MARKERS), index)


def test_a_shared_greeting_is_ambiguous_and_the_newest_chat_wins() -> None:
    index = ChatIndex()
    index.put(entry("u/chats/S/old", 100.0, [(False, "Seraphina", GREETING)]))
    index.put(entry("u/chats/S/new", 200.0, [(False, "Seraphina", GREETING)]))
    found = run(
        index, request(("assistant", "*You wake in a glade.*  Welcome, Alex."), ("user", "Hello?"))
    )
    # The user's new message is not in this index yet (the library re-reads the file
    # first), so the request's end meets no chat's end: it is taken for one of ST's
    # prompts after the history, and the request for a quiet one.
    assert found is not None and found.generation == "quiet" and found.confidence < 0.5
    # The greeting arrives with {{user}} filled in and its whitespace changed.
    greeting_only = request(("assistant", "*You wake in a glade.*  Welcome, Alex."))
    found = run(index, [*greeting_only, ChatMessage("system", "[Summarise the story.]")])
    assert found is not None
    assert found.chat_id == "u/chats/S/new"
    assert found.confidence < 0.5


def test_sts_prompt_as_a_user_message_after_the_history() -> None:
    # A Prompt Manager prompt, an Author's Note or world info "in chat" at depth 0 as the
    # user's: a user message after the history that no chat holds.
    index = ChatIndex()
    turns = [(False, "Seraphina", GREETING), (True, "Alex", "Where am I?"),
             (False, "Seraphina", "In my glade."), (True, "Alex", "Thank you.")]  # fmt: skip
    index.put(entry("u/chats/S/mine", 100.0, turns))
    shown = [("user" if u else "assistant", t.replace("{{user}}", "Alex")) for u, _, t in turns]
    prompt = ("user", "[OOC: describe the weather.]")
    found = run(index, request(*shown, prompt))
    assert found is not None
    assert (found.chat_id, found.generation, found.confidence) == ("u/chats/S/mine", "normal", 1.0)
    assert found.history == (2, 3, 4, 5)  # the prompt is no chat message
    # A swipe: the file has the reply the request regenerates.
    index.put(entry("u/chats/S/mine", 200.0, [*turns, (False, "Seraphina", "You're welcome.")]))
    found = run(index, request(*shown, prompt))
    assert found is not None and (found.generation, found.target_message) == ("swipe", 4)
    # A text prompt ends with the open turn of the one who answers: the prompt before it
    # may be the character's.
    opened = (("assistant", ""),)
    found = run(index, request(*shown, ("assistant", prompt[1]), trailing=opened))
    assert found is not None and (found.generation, found.target_message) == ("swipe", 4)
    # ST's continue nudge as the user's, after the reply it continues.
    nudge = ("user", "[Continue your last message without repeating its original content.]")
    continued = run(index, request(*shown, ("assistant", "You're welcome."), nudge))
    assert continued is not None and continued.generation == "continue"
    # Named by a header: the kind is still worked out past the prompt.
    messages = request(*shown, prompt)
    named = identify(messages, find_history(messages, MARKERS), index, only="u/chats/S/mine")
    assert named is not None and named.generation == "swipe"


def test_more_matching_history_beats_recency() -> None:
    index = ChatIndex()
    turns = [
        (False, "Seraphina", GREETING),
        (True, "Alex", "Where am I?"),
        (False, "Seraphina", "In my glade."),
        (True, "Alex", "Thank you."),
    ]
    index.put(entry("u/chats/S/mine", 100.0, turns))
    index.put(
        entry(
            "u/chats/S/other",
            300.0,
            [*turns[:2], (False, "Seraphina", "Elsewhere."), (True, "Alex", "Thank you.")],
        )
    )
    found = run(
        index,
        request(
            ("assistant", "*You wake in a glade.* Welcome, Alex."),
            ("user", "Where am I?"),
            ("assistant", "In my glade."),
            ("user", "Thank you."),
        ),
    )
    assert found is not None
    assert (found.chat_id, found.generation, found.target_message) == (
        "u/chats/S/mine",
        "normal",
        4,
    )
    assert found.confidence == 1.0
    assert found.history == (2, 3, 4, 5)


def test_group_names_in_content_and_quiet_requests() -> None:
    index = ChatIndex()
    index.put(
        entry(
            "u/group chats/g",
            1.0,
            [
                (False, "Orin", "Ah, company."),
                (True, "Alex", "Hello both."),
                (False, "Orin", "Good evening."),
            ],
        )
    )
    messages = request(
        ("assistant", "Orin: Ah, company."),
        ("user", "Hello both."),
        ("assistant", "Orin: Good evening."),
        trailing=(("system", "[Write a summary of the chat so far.]"),),
    )
    found = run(index, messages)
    assert found is not None
    assert (found.generation, found.target_message) == ("quiet", None)
    nudged = [*messages[:-1], ChatMessage("system", "[Write the next reply only as Seraphina.]")]
    found = run(index, nudged)
    assert found is not None and (found.generation, found.target_message) == ("normal", 3)
    # A text prompt's open turn of the next speaker: a new reply too.
    found = run(index, [*messages[:-1], ChatMessage("assistant", "", "Seraphina")])
    assert found is not None and (found.generation, found.target_message) == ("normal", 3)
    # A group's continue carries the group nudge too: it is still a continue.
    cont = ChatMessage("system", "[Continue your last message without repeating it.]")
    for trailing in ([nudged[-1], cont], [cont, nudged[-1]]):
        found = run(index, [*messages[:-1], *trailing])
        assert found is not None and (found.generation, found.target_message) == ("continue", 2)


def test_an_impersonation_after_the_users_message_is_quiet() -> None:
    index = ChatIndex()
    index.put(entry("u/chats/S/i", 1.0, [(False, "Seraphina", "Hello."), (True, "Alex", "Hi.")]))
    turns = (("assistant", "Hello."), ("user", "Hi."))
    prompt = "[Write your next reply from the point of view of Alex, using the chat history.]"
    for trailing in (("system", prompt),), (("user", ""),):  # a chat, a text prompt
        found = run(index, request(*turns, trailing=trailing))
        assert found is not None and (found.generation, found.target_message) == ("quiet", None)
    # ST's "squash system messages" joins it to the post-history instructions before it.
    squashed = f"Stay in character.\n{prompt}"
    found = run(index, request(*turns, trailing=(("system", squashed),)))
    assert found is not None and found.generation == "quiet"
    found = run(index, request(*turns))
    assert found is not None and (found.generation, found.target_message) == ("normal", 2)
    # Instructions that merely mention it are no impersonation.
    mention = f"Stay in character. {prompt}"
    found = run(index, request(*turns, trailing=(("system", mention),)))
    assert found is not None and found.generation == "normal"


def test_continue_with_a_partial_prefill() -> None:
    index = ChatIndex()
    index.put(
        entry(
            "u/chats/S/c",
            1.0,
            [
                (True, "Alex", "Tell me a story."),
                (False, "Seraphina", "Once upon a time, in Eldoria."),
            ],
        )
    )
    messages = request(("user", "Tell me a story."), trailing=(("assistant", "Once upon a time,"),))
    found = run(index, messages)
    assert found is not None
    assert (found.generation, found.target_message) == ("continue", 1)
    # With the speaker's name, as a text prompt keeps it when the name is not told apart.
    named = (("assistant", "Seraphina: Once upon a time,"),)
    found = run(index, request(("user", "Tell me a story."), trailing=named))
    assert found is not None and (found.generation, found.target_message) == ("continue", 1)
    # Without prefill: ST's nudge, squashed after an Author's Note at depth 0 when ST's
    # "squash system messages" is on; a line that only starts alike is no nudge.
    turns = (("user", "Tell me a story."), ("assistant", "Once upon a time, in Eldoria."))
    note = "[Author's note: it rains.]"
    for after, kind in (
        ("[Continue your last message without repeating its original content.]", "continue"),
        ("[Continue the story in the present tense.]", "quiet"),
    ):
        found = run(index, request(*turns, trailing=(("system", f"{note}\n{after}"),)))
        assert found is not None and found.generation == kind


def test_a_continue_prefilled_with_the_whole_last_reply_is_of_the_chat_that_holds_it() -> None:
    """A branch made before the last reply, and its parent opened again: ST's continue of
    that reply (with instruct off, the prompt ends with it: a prefill) is the parent's,
    which holds the prefill as its last message, not the branch's next reply begun with
    a prefill that is the parent's whole message, though the branch was saved last."""
    turns = [(True, "Alex", "Tell me a story."), (False, "Seraphina", "Once upon a time.")]
    turns.append((True, "Alex", "And then?"))
    reply = (False, "Seraphina", "Then the river rose, and Eldoria woke.")
    index = ChatIndex()
    index.put(entry("u/chats/S/parent", 1.0, [*turns, reply]))
    index.put(entry("u/chats/S/parent - Branch #2", 2.0, turns))
    shown = [("user" if u else "assistant", t) for u, _, t in turns]
    for prefill in (reply[2], f"Seraphina: {reply[2]}"):
        found = run(index, request(*shown, trailing=(("assistant", prefill),)))
        assert found is not None
        assert (found.chat_id, found.generation, found.target_message) == (
            "u/chats/S/parent",
            "continue",
            3,
        )
        assert found.confidence == 1.0


def test_a_swipe_of_a_reply_that_follows_another_reply() -> None:
    """Two replies in a row (a user message deleted between them, a reply sent as the
    character): a swipe of the second sends the first last, where a prefill would be."""
    index = ChatIndex()
    turns = [
        (True, "Alex", "Tell me a story."),
        (False, "Seraphina", "Once upon a time, in Eldoria."),
        (False, "Seraphina", "The river spirits woke."),
    ]
    index.put(entry("u/chats/S/c", 1.0, turns))
    messages = request(("user", "Tell me a story."), ("assistant", "Once upon a time, in Eldoria."))
    found = run(index, messages)
    assert found is not None
    assert (found.chat_id, found.generation, found.target_message) == ("u/chats/S/c", "swipe", 2)
    assert (found.history, found.positions, found.confidence) == ((2, 3), (0, 1), 1.0)
    # A continue of the second with its start as the prefill is still a continue.
    prefilled = [*messages, ChatMessage("assistant", "The river")]
    found = run(index, prefilled)
    assert found is not None and (found.generation, found.target_message) == ("continue", 2)


# -- the fast path: request texts fingerprinted once, memoised across requests ---------------

WORDS = ["glade", "wolf", "river", "oath", "moon", "lantern", "key", "gate", "forest", "spirit"]


def full_path(
    messages: list[ChatMessage], index: ChatIndex, monkeypatch: pytest.MonkeyPatch
) -> object:
    """`identify` with every request message fingerprinted afresh (no memo)."""
    with monkeypatch.context() as patched:
        patched.setattr(module, "message_fingerprint", fingerprint)
        return run(index, messages)


def test_the_fast_path_answers_as_the_full_path_through_edits_swipes_and_deletions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(11)
    chat: list[tuple[bool, str, str]] = [(False, "Seraphina", GREETING)]

    def say(is_user: bool) -> tuple[bool, str, str]:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        return (is_user, "Alex" if is_user else "Seraphina", text.capitalize() + ".")

    kinds: set[str] = set()
    index = ChatIndex()
    for step in range(300):
        action = rng.random()
        if action < 0.5 or len(chat) < 6:
            chat += [say(True)] if chat[-1][0] is False else [say(False), say(True)]
        elif action < 0.65:  # an edit anywhere
            at = rng.randrange(1, len(chat))
            chat[at] = (chat[at][0], chat[at][1], chat[at][2] + " (edited)")
        elif action < 0.8:  # a deletion
            del chat[rng.randrange(1, len(chat))]
        elif chat[-1][0] is True:  # a reply, then its swipe
            chat.append(say(False))
        window = chat[rng.randint(0, max(0, len(chat) - 20)) :]  # ST's context cut
        turns = [
            ("user" if u else "assistant", t.replace("{{user}}", "Alex")) for u, _, t in window
        ]
        variants = [request(*turns)]
        if chat[-1][0] is False:  # the last reply regenerated: ST leaves it out
            variants.append(request(*turns[:-1]))
            variants.append(request(*turns, trailing=(("system", "[Continue your last message]"),)))
        # As the library goes: the request's prints and likely chats first, against the
        # index as it was; then the re-read of ST's save; then the identification.
        early = [(m, module.prints(m, find_history(m, MARKERS), index)) for m in variants]
        for _, printed in early:
            module.likely_chats(printed, index)
        index.put(entry("u/chats/S/chat", float(step), chat))
        for messages, printed in early:
            fast = identify(messages, find_history(messages, MARKERS), index, printed=printed)
            assert fast == run(index, messages) == full_path(messages, index, monkeypatch), step
            if fast is not None:
                kinds.add(fast.generation)
        if step % 50 == 0:
            message_fingerprint.cache_clear()  # a cold memo answers alike too
    assert {"normal", "swipe", "continue"} <= kinds


def test_prints_taken_before_the_index_changed_see_the_change() -> None:
    """The library works a request's prints out once, then re-reads the likely chats: the
    chats those prints hold are looked up again when the index changed in between."""
    index = ChatIndex()
    turns = [(False, "Seraphina", GREETING), (True, "Alex", "Where am I?")]
    index.put(entry("u/chats/S/a", 100.0, turns))
    messages = request(
        ("assistant", "*You wake in a glade.* Welcome, Alex."), ("user", "Where am I?")
    )
    span = find_history(messages, MARKERS)
    printed = module.prints(messages, span, index)
    assert module.likely_chats(printed, index) == ["u/chats/S/a"]
    index.put(entry("u/chats/S/b", 200.0, turns))  # saved meanwhile, the same start
    found = identify(messages, span, index, printed=printed)
    assert found is not None and found.chat_id == "u/chats/S/b" and found.confidence < 0.5
    assert module.likely_chats(printed, index) == ["u/chats/S/b", "u/chats/S/a"]
    index.remove("u/chats/S/b")
    assert identify(messages, span, index, printed=printed) == run(index, messages)


# -- messages ST changed on the way: a regex script that alters the prompt only ----------------


def regexed_story(count: int) -> tuple[list[tuple[bool, str, str]], list[tuple[str, str]]]:
    """A chat whose replies open with a `[Day N]` header and end with a status block, and
    the turns of a request whose prompt-only regex scripts took both off."""
    turns: list[tuple[bool, str, str]] = []
    shown: list[tuple[str, str]] = []
    for i in range(count):
        if i % 2:
            text = f"Alex asks about the road, time {i}."
            turns.append((True, "Alex", text))
            shown.append(("user", text))
        else:
            text = f"The river bends west at the old mill, she says, time {i}."
            turns.append((False, "Seraphina", f"[Day {i}] {text}\n<status>HP {i}</status>"))
            shown.append(("assistant", text))
    return turns, shown


def test_replies_a_regex_script_changed_are_still_the_chats_messages() -> None:
    turns, shown = regexed_story(13)  # the last a reply
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, turns))
    nudge = ("system", "[Continue your last message without repeating its original content.]")
    impersonation = ("system", "[Write your next reply from the point of view of Alex.]")
    group = ("system", "[Write the next reply only as Seraphina.]")
    thought = "<think>\nOn with it.\n</think>\n\n"
    named = f"Seraphina: {thought}{shown[-1][1]}\n\n[Author's note: it rains.]"
    for messages, kind in (
        (request(*shown[:-1]), "swipe"),
        (request(*shown, trailing=(nudge,)), "continue"),
        (request(*shown, trailing=(impersonation,)), "quiet"),
        (request(*shown, trailing=(group,)), "normal"),
        # Named, with its reasoning and ST's note joined to it (Claude's merged turns).
        (request(*shown[:-1], ("assistant", named), trailing=(nudge,)), "continue"),
    ):
        found = run(index, messages)
        assert found is not None and found.generation == kind, (kind, found)
        # Every message is the chat's, the oldest too (it holds the start of the file's).
        assert found.confidence == 1.0 and found.positions[-1] in (11, 12)
        assert found.positions[0] == 0 and len(found.history) == found.positions[-1] + 1
    index.put(entry("u/chats/S/c", 2.0, [*turns, (True, "Alex", "And then?")]))
    found = run(index, request(*shown, ("user", "And then?")))
    assert found is not None and (found.generation, found.target_message) == ("normal", 14)
    assert found.positions == tuple(range(14)) and found.confidence == 1.0


def test_a_branch_that_holds_the_reply_as_sent_wins_over_one_that_changed() -> None:
    """Two chats that part at the last reply: the one holding it as the request has it
    wins, not tied with the one whose reply only starts alike."""
    turns, shown = regexed_story(5)
    exact = [(u, n, t) for (u, n, _), (_, t) in zip(turns, shown, strict=True)]
    index = ChatIndex()
    index.put(entry("u/chats/S/a", 2.0, turns))  # saved last
    index.put(entry("u/chats/S/b", 1.0, exact))
    nudge = ("system", "[Continue your last message without repeating its original content.]")
    found = run(index, request(*shown, trailing=(nudge,)))
    assert found is not None and (found.chat_id, found.confidence) == ("u/chats/S/b", 1.0)


def test_sts_prompts_inside_a_short_chat_sent_whole_leave_it_certain() -> None:
    # A swipe of a short chat sent whole, ST's Author's Note at a depth among its
    # messages: every chat message matched, so no doubt, though the note matches nothing.
    index = ChatIndex()
    turns = [
        (False, "Seraphina", GREETING),
        (True, "Alex", "Where am I?"),
        (False, "Seraphina", "In my glade."),
    ]
    index.put(entry("u/chats/S/mine", 100.0, turns))
    found = run(
        index,
        request(
            ("assistant", "*You wake in a glade.* Welcome, Alex."),
            ("system", "[Author's note: it rains.]"),
            ("user", "Where am I?"),
        ),
    )
    assert found is not None and (found.generation, found.target_message) == ("swipe", 2)
    assert found.confidence == 1.0


def test_a_swipe_after_two_replies_that_a_regex_script_changed() -> None:
    """The file ends with two replies, each with the status block a prompt-only regex
    script takes off: a swipe of the second sends the first changed, last in the history
    (before ST's group nudge) or where a prefill would be (nothing after it)."""
    turns, shown = regexed_story(13)  # the last a reply
    second = (False, "Seraphina", "[Day 13] The mill wheel stops.\n<status>HP 13</status>")
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, [*turns, second]))
    group = ("system", "[Write the next reply only as Seraphina.]")
    for messages in (request(*shown, trailing=(group,)), request(*shown)):
        found = run(index, messages)
        assert found is not None and (found.generation, found.target_message) == ("swipe", 13)
        assert found.confidence == 1.0 and found.positions == tuple(range(13))


def test_two_last_replies_merged_into_one_turn_are_not_a_swipe_of_the_second() -> None:
    """ST merges the two replies that end the file into one turn for Claude: before an
    impersonation prompt that turn holds both, and the request is a quiet one, not a
    swipe of the second (the turn starts as the first does)."""
    turns, shown = regexed_story(12)  # the last the user's
    replies = ["The mill wheel stops at dusk, she says.", "Then the lanterns go out, one by one."]
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, [*turns, *((False, "Seraphina", r) for r in replies)]))
    impersonation = ("system", "[Write your next reply from the point of view of Alex.]")
    merged = ("assistant", "\n\n".join(replies))
    found = run(index, request(*shown, merged, trailing=(impersonation,)))
    assert found is not None and found.generation == "quiet"


def test_two_changed_replies_in_a_row_past_the_texts_the_index_keeps() -> None:
    """Every reply's status block cut from the prompt, and two replies in a row (a user's
    message moved), older than the newest messages whose text the index keeps: the
    request is still this chat's from its first message on."""
    turns, shown = regexed_story(42)  # the last the user's
    turns.insert(6, (False, "Seraphina", "[Day 6] Night falls on the mill.\n<status>HP 6</status>"))
    shown.insert(6, ("assistant", "Night falls on the mill."))
    # From the user's message on: a changed reply first has no message before it to match.
    turns, shown = turns[1:], shown[1:]
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, turns))
    found = run(index, request(*shown))
    assert found is not None and found.generation == "normal" and found.confidence == 1.0
    assert found.positions == tuple(range(len(turns)))


def test_replies_merged_into_one_turn_after_a_regex_script_changed_them() -> None:
    """A group's members answering in a row, the status block cut from each and ST merging
    them into one turn (Claude, post-processed prompts): the turn stands for every reply in
    it, where the index keeps their texts and older, and the request is this chat's from
    its first message on."""
    turns: list[tuple[bool, str, str]] = []
    shown: list[tuple[str, str]] = []
    for i in range(1, 42):  # from the user's message on, the last the user's
        if i % 2:
            asked = f"Alex asks about the road, time {i}."
            turns.append((True, "Alex", asked))
            shown.append(("user", asked))
            continue
        said = [f"The river bends west at the old mill, she says, time {i}."]
        if i in (10, 32):  # past the texts the index keeps, and within them
            said.append(f"Orin joins her at the mill and says nothing, time {i}.")
            said.append(f"Seraphina turns to him at last, time {i}.")
        for n, text in enumerate(said):
            name = ("Seraphina", "Orin")[n % 2]
            turns.append((False, name, f"[Day {i}] {text}\n<status>HP {i}</status>"))
        shown.append(("assistant", "\n\n".join(said)))
    index = ChatIndex()
    index.put(entry("u/chats/S/c", 1.0, turns))
    found = run(index, request(*shown))
    assert found is not None and found.generation == "normal" and found.confidence == 1.0
    assert found.positions[0] == 0 and len(found.history) == len(shown)
    # Each merged turn stands at its run's newest message (left out once all is covered).
    merged = [i for i, (_, text) in enumerate(shown) if "\n\n" in text]
    assert [found.positions[i] for i in merged] == [11, 35]
