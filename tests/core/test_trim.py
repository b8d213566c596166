"""Which covered chat messages may be left out of a request."""

from __future__ import annotations

import itertools
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.fingerprints import index_message
from proxy.core.models import ChatMessage
from proxy.core.trim import (
    GLUED,
    MAX_SKIPPED,
    Covered,
    _anchor,
    _Request,
    droppable,
    stepped_drop,
    stepped_start,
    trim_cutoff,
)


def covered(texts: list[str], *, exact: bool = True) -> Covered:
    fps = [index_message(i, False, "Ava", t).fps for i, t in enumerate(texts)]
    return Covered.of(fps, texts if exact else ())


def test_cutoff_keeps_the_last_scenes_and_never_passes_the_recap() -> None:
    assert trim_cutoff([9, 20, 31], 31, 1) == 31
    assert trim_cutoff([9, 20, 31], 31, 2) == 20
    assert trim_cutoff([9, 20, 31], 20, 1) == 20  # the newest scene is not folded in yet
    assert trim_cutoff([9], 9, 2) is None  # fewer scenes than asked to keep
    assert trim_cutoff([9, 20], None, 1) is None  # no running recap: nothing goes
    assert trim_cutoff([9, 20], 20, -1) is None
    assert trim_cutoff([9, 20], 20, 0) == 20


def test_only_aligned_covered_messages_go() -> None:
    chat = [f"message {i} of the story" for i in range(10)]
    request = [
        ChatMessage("system", "main prompt"),
        ChatMessage("system", "[Start a new Chat]"),
        *[ChatMessage("assistant", t) for t in chat[:3]],
        ChatMessage("system", "[Author's note]"),  # ST's injection inside the history
        *[ChatMessage("assistant", t) for t in chat[3:]],
    ]
    history = list(range(2, len(request)))
    assert droppable(request, history, covered(chat[:5])) == [2, 3, 4, 6, 7]


def test_st_cut_the_oldest_messages_and_newer_ones_are_kept() -> None:
    chat = [f"line {i}" for i in range(10)]
    request = [ChatMessage("assistant", t) for t in chat[4:]]  # ST kept 4..9
    assert droppable(request, list(range(6)), covered(chat[:6])) == [0, 1]
    # A known newer message stops the run even when its text repeats an old one.
    assert droppable(request, list(range(6)), covered(chat[:6]), keep={1}) == [0]
    # Known newer messages that are not history (here 9) do not hide those that are.
    prompted = [ChatMessage("system", "main prompt"), *request]
    history = list(range(1, 7))
    assert droppable(prompted, history, covered(chat[:10]), keep={2, 9}) == [1]
    assert droppable(prompted, history, covered(chat[:10]), keep={0, 3}) == [1, 2]


def test_a_lone_repeated_text_does_not_start_a_run() -> None:
    chat = ["Yes.", "old a", "old b"]
    request = [ChatMessage("user", "Yes."), ChatMessage("assistant", "new reply")]
    assert droppable(request, [0, 1], covered(chat)) == []


def test_names_in_content_and_whitespace_still_line_up() -> None:
    chat = [f"line {i}" for i in range(4)]
    request = [ChatMessage("assistant", f"Ava:  line {i}\n") for i in range(4)]
    for exact in (True, False):
        assert droppable(request, list(range(4)), covered(chat[:3], exact=exact)) == [0, 1, 2]


# Sizes such that ST's cut, the covered run and the first known newer message mostly fall
# inside the chat, where a run compared at once could differ from the walk.
@settings(max_examples=400, deadline=None)
@given(
    chat=st.lists(st.sampled_from(["a", "b", "c", "Yes.", "d e", "f"]), min_size=1, max_size=20),
    cut=st.integers(0, 20),
    sent_from=st.integers(0, 8),
    injections=st.lists(
        st.tuples(st.integers(0, 20), st.sampled_from(["[note]", "b"])), max_size=2
    ),
    keep_from=st.integers(0, 22),
    outside=st.booleans(),
    exact=st.booleans(),
)
def test_a_covered_run_compared_at_once_leaves_out_what_one_by_one_would(
    chat: list[str],
    cut: int,
    sent_from: int,
    injections: list[tuple[int, str]],
    keep_from: int,
    outside: bool,
    exact: bool,
) -> None:
    texts = [f"{t} {i % 3}" for i, t in enumerate(chat)]  # repeats, as chats have
    sent = [ChatMessage("assistant", t) for t in texts[sent_from:]]
    for at, text in sorted(injections, reverse=True):
        sent.insert(min(at, len(sent)), ChatMessage("system", text))
    request = [ChatMessage("system", "main prompt"), *sent]
    history = list(range(1, len(request)))
    # Known newer messages; `outside`: and an index that is not history at all.
    keep = {i for i in history if i >= keep_from} | ({0} if outside else set())
    done = covered(texts[: cut + 1], exact=exact)
    at_once = droppable(request, history, done, keep)
    if history and history[0] in keep:
        # Nothing goes when the oldest history message is known newer (answered at once,
        # without looking for the first kept one: most small requests' case).
        assert at_once == []
    # The reference: the same walk with no run compared in one step.
    with patch.object(_Request, "exact_run", lambda *_: 0):
        assert at_once == droppable(request, history, done, keep)


def test_extending_the_covered_messages_equals_building_them_whole() -> None:
    fps = [(1, 2), (3,), (2, 4), (5,)]
    texts = ["a", "b", "c", "a"]
    whole = Covered.of(fps, texts)
    first = Covered.of(fps[:2], texts[:2])
    grown = first.extended(fps[2:], texts[2:])
    assert (grown.fps, grown.raws, grown.by_fp, grown.by_raw) == (
        whole.fps,
        whole.raws,
        whole.by_fp,
        whole.by_raw,
    )
    # The value it grew from is untouched (a request may still be reading it).
    assert first.by_fp == Covered.of(fps[:2], texts[:2]).by_fp and len(first.fps) == 2


def test_the_history_start_steps_on_only_where_st_cut_into_uncovered_messages() -> None:
    # ST's cut moving by two per exchange: the start moves every other exchange.
    assert [stepped_start(cut, 4, None) for cut in (21, 22, 23, 24, 25)] == [24, 24, 24, 24, 28]
    assert stepped_start(0, 4, None) == 0  # ST sent the whole chat
    assert stepped_start(None, 4, None) is None
    assert stepped_start(21, 1, None) == 21
    # Trimming's own cut (30: it keeps 31 on) holds the start at 31 already; past it,
    # the steps count from 31, so that the first one is a whole step too.
    assert stepped_start(29, 4, 30) == 29
    assert stepped_start(31, 4, 30) == 31
    assert [stepped_start(cut, 4, 30) for cut in (32, 33, 35, 36)] == [35, 35, 35, 39]


@settings(max_examples=200, deadline=None)
@given(
    positions=st.lists(st.integers(0, 60), max_size=30, unique=True).map(sorted),
    start=st.integers(0, 70),
    keep=st.integers(0, 10),
)
def test_the_matched_messages_before_the_start_are_all_that_go(
    positions: list[int], start: int, keep: int
) -> None:
    """An identification's positions rise with the request's order: the messages before
    the start are its first ones, found by bisection."""
    matched = [2 + 2 * k for k in range(len(positions))]
    history = list(range(2, 2 + 2 * len(positions)))
    early = [i for i, p in zip(matched, positions, strict=True) if p < start]
    expected = early if len(history) - len(early) >= keep else []
    assert stepped_drop(history, matched, positions, start, keep) == expected


def test_only_matched_messages_before_the_start_go() -> None:
    history = [2, 3, 4, 5, 6, 7, 8, 9]
    # Request index 5 is ST's injection (it matches no chat message).
    matched, positions = [2, 3, 4, 6, 7, 8, 9], [21, 22, 23, 24, 25, 26, 27]
    assert stepped_drop(history, matched, positions, 24, 4) == [2, 3, 4]
    assert stepped_drop(history, matched, positions, 21, 4) == []
    # Too little would be left: nothing goes.
    assert stepped_drop(history, matched, positions, 26, 4) == []
    # The oldest history message is not identified: its position is not known.
    assert stepped_drop(history, matched[1:], positions[1:], 24, 4) == []


@given(
    step=st.integers(1, 8),
    cutoff=st.none() | st.integers(0, 50),
    first=st.integers(1, 60),
    moves=st.lists(st.integers(0, 3), max_size=40),
)
def test_the_start_never_precedes_st_and_moves_at_most_once_a_step(
    step: int, cutoff: int | None, first: int, moves: list[int]
) -> None:
    cuts = [first]
    for move in moves:
        cuts.append(cuts[-1] + move)  # ST's cut only moves on as the chat grows
    starts = [stepped_start(cut, step, cutoff) for cut in cuts]
    for cut, start in zip(cuts, starts, strict=True):
        assert start is not None and cut <= start < cut + step
    # Where the history really starts: trimming leaves out everything to its cutoff.
    held = 0 if cutoff is None else cutoff + 1
    real = [max(start or 0, held) for start in starts]
    changes = sum(a != b for a, b in itertools.pairwise(real))
    # Each change needs ST's cut to have passed the start before it: a whole step on
    # (the first one, out of trimming's hold, may take less).
    assert changes <= (cuts[-1] - cuts[0]) // step + 1


def test_covered_replies_st_changed_on_the_way_go_but_not_its_prompts() -> None:
    """A prompt-only regex script took each reply's status block off: the replies match
    no covered message as they are, but stand where covered ones do, between the user's
    messages that match. ST's own prompt between them stays."""
    chat = [f"line {i} of the story" + ("" if i % 2 else " <status>HP</status>") for i in range(10)]
    sent = [ChatMessage("user" if i % 2 else "assistant", t.replace(" <status>HP</status>", ""))
            for i, t in enumerate(chat)]  # fmt: skip
    note = ChatMessage("system", "[Author's note]")
    request = [*sent[:6], note, *sent[6:]]
    # The first has no message before it to tell it by; the note stays.
    assert droppable(request, list(range(11)), covered(chat[:8])) == [1, 2, 3, 4, 5, 7, 8]
    # A changed reply with no covered message after it to tell it by stays too.
    assert droppable(request, list(range(11)), covered(chat[:7])) == [1, 2, 3, 4, 5]
    # One of ST's prompts never stands for a covered message.
    noted = [*sent[:2], note, *sent[3:]]
    assert droppable(noted, list(range(10)), covered(chat[:8])) == [3, 4, 5, 6, 7]
    # A lone match followed by a changed one and nothing after starts no run.
    assert droppable(sent[:3], [0, 1, 2], covered(chat[:8])) == []


def test_a_covered_reply_read_as_two_messages_goes_whole() -> None:
    """A request read without message bounds (ST's single user message) split a reply
    where a paragraph of it starts as the user's line does: both halves go, first in the
    history or later, and neither is left behind alone."""
    chat = [f"line {i} of the story" for i in range(8)]
    chat[0] = chat[0] + "\n\nTom: I will come back.\n\nShe nods."
    chat[4] = chat[4] + "\n\nTom: At dawn."
    halves = {0: chat[0].split("\n\nTom", 1), 4: chat[4].split("\n\nTom", 1)}
    request: list[ChatMessage] = []
    for i, text in enumerate(chat):
        if i in halves:
            first, second = halves[i]
            request += [ChatMessage("assistant", first), ChatMessage("user", "Tom" + second)]
        else:
            request.append(ChatMessage("user" if i % 2 else "assistant", text))
    history = list(range(len(request)))
    assert droppable(request, history, covered(chat[:6])) == [0, 1, 2, 3, 4, 5, 6, 7]
    # The newer messages are kept: the run stops before them.
    assert droppable(request, history, covered(chat[:6]), keep={8}) == [0, 1, 2, 3, 4, 5, 6, 7]
    # A text prompt's turn carries its speaker's name apart.
    told = [
        *request[:1],
        ChatMessage("user", "I will come back.\n\nShe nods.", "Tom"),
        *request[2:],
    ]
    assert droppable(told, history, covered(chat[:6])) == [0, 1, 2, 3, 4, 5, 6, 7]
    # A message the chat has no such joined text of stays.
    other = [ChatMessage("assistant", "line 0 of the story"), ChatMessage("user", "Tom: no.")]
    assert droppable([*other, *request[2:]], history, covered(chat[:6]))[:2] == [2, 3]


def test_a_request_that_matches_nothing_is_not_joined_up_pair_by_pair() -> None:
    """Every message named and changed on its way (none matches): the joins tried are a
    dozen, not two for each of its messages (tens of ms on the chat path)."""
    chat = [f"line {i} of the story" for i in range(100)]
    request = [ChatMessage("user", f"Tom: {t} changed") for t in chat]
    joined = []

    def counted(text: str) -> int:
        joined.append(text)
        return hash(text)

    with patch("proxy.core.trim.fingerprint", counted):
        assert droppable(request, list(range(100)), covered(chat[:90])) == []
    assert 0 < len(joined) <= MAX_SKIPPED * (GLUED - 1)


def test_a_run_of_covered_messages_is_anchored_by_two_in_a_row_or_by_the_last_alone() -> None:
    chat = ["The gate creaks.", "Who goes there?", "A friend.", "Then enter."]
    history = [ChatMessage("system", "Write the next reply."), *(
        ChatMessage("user" if i % 2 else "assistant", t) for i, t in enumerate(chat)
    )]  # fmt: skip
    request = _Request(history, list(range(len(history))))
    known = covered(chat)
    assert _anchor(request, known, 0) is None  # ST's prompt: no chat message
    assert _anchor(request, known, 1) == 0  # and the next one follows it
    assert _anchor(request, known, 4) == 3  # the last covered message alone
    # A message ST changed on its way between two covered ones: the next but one anchors.
    changed = [*history[:2], ChatMessage("user", "Who goes there? [image]"), *history[3:]]
    assert _anchor(_Request(changed, list(range(len(changed)))), known, 1) == 0
    # Out of order: a match whose next message is not the next covered one anchors nothing.
    shuffled = [history[0], history[1], history[3], history[2]]
    assert _anchor(_Request(shuffled, [0, 1, 2, 3]), known, 1) is None
