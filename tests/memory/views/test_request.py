"""Where a request's history starts: ST's cut, stepped, and held before a message that
has nothing to stand in for it yet (`proxy.memory.views.view.history_start`)."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core.fingerprints import index_message
from proxy.core.models import ChatMessage, Identification
from proxy.core.recaps import Candidate, RecapShelf
from proxy.core.trim import Covered, Cut
from proxy.memory.views.request import history_start, request_memory, stands_for
from proxy.memory.views.view import MemoryView
from proxy.settings.memory import MemorySettings

SETTINGS = MemorySettings(history_cut_step=4)
# Trimming keeps 9 on (the running recap covers 0-8): the steps are 9, 13, 17, 21, 25, ...
FOLDED = MemoryView(running="They met at the mill.", covered_through=8, cutoff=8)


def sent_from(cut: int, total: int = 40) -> tuple[Identification, list[int]]:
    """ST's request holding chat positions `cut`.. as request indices 2.. (two system
    messages before them), every one matched to the chat."""
    history = list(range(2, 2 + total - cut))
    ident = Identification(
        "c", 1.0, "normal", total, tuple(history), len(history), tuple(range(cut, total))
    )
    return ident, history


def started(view: MemoryView, cut: int) -> tuple[Cut | None, list[int]]:
    ident, history = sent_from(cut)
    return history_start(view, SETTINGS, ident, history)


def test_the_start_steps_past_messages_that_have_their_recaps() -> None:
    # ST cuts at 22: the step starts the history at 25, leaving out 22-24 (indices 2-4).
    assert started(FOLDED, 22) == (Cut(22, 25, 25), [2, 3, 4])


@pytest.mark.parametrize(
    ("lacking", "expected"),
    [
        ((24,), (Cut(22, 24, 25), [2, 3])),  # held before 24
        ((22, 30), (Cut(22, 22, 25), [])),  # the first one ST sent lacks it: nothing goes
        ((10, 12), (Cut(22, 25, 25), [2, 3, 4])),  # ST cut those itself: they hold nothing
        ((25, 26), (Cut(22, 25, 25), [2, 3, 4])),  # sent anyway
    ],
)
def test_a_message_lacking_its_recap_holds_the_start_before_it(
    lacking: tuple[int, ...], expected: tuple[Cut, list[int]]
) -> None:
    view = MemoryView(running=FOLDED.running, covered_through=8, cutoff=8, lacking=lacking)
    assert started(view, 22) == expected


def test_without_a_running_recap_or_with_trimming_off_the_start_is_st_cut() -> None:
    unmoved: tuple[Cut, list[int]] = (Cut(22, 22, 22), [])
    assert started(MemoryView(), 22) == unmoved
    ident, history = sent_from(22)
    off = MemorySettings(history_cut_step=4, auto_hide_scene_count=-1)
    assert history_start(FOLDED, off, ident, history) == unmoved


def test_uncovered_messages_not_looked_at_hold_the_start_too() -> None:
    """Older than planning's lookback, the uncovered messages are not read one by one:
    any of them may lack its recap."""
    view = MemoryView(
        running=FOLDED.running,
        covered_through=8,
        cutoff=8,
        lacking=(24,),
        unscanned=range(9, 20),
    )
    assert [view.held(cut) for cut in (5, 12, 20, 25)] == [9, 12, 24, None]
    assert started(view, 12) == (Cut(12, 12, 13), [])


def test_an_outdated_view_leaves_nothing_out() -> None:
    """Built from another version of the file than the one a re-read found, a view's
    cutoff is by positions from before messages moved: the history stays as ST sent it
    until planning builds the next view."""
    texts = [f"Message {p} of the walk to the mill." for p in range(12)]
    covered = Covered.of(
        [index_message(p, p % 2 == 1, "Ava", t).fps for p, t in enumerate(texts[:9])], texts[:9]
    )
    view = dataclasses.replace(FOLDED, covered=covered, budget=4000)
    messages = [ChatMessage("system", "Main."), ChatMessage("system", "[Start a new Chat]")]
    messages += [ChatMessage("user" if p % 2 else "assistant", t) for p, t in enumerate(texts)]
    history = list(range(2, 14))
    ident = Identification("c", 1.0, "normal", 12, tuple(history), 12, tuple(range(12)))
    unmoved = (Cut(0, 0, 0), list[int]())
    got = request_memory(view, SETTINGS, ident, messages, history, unmoved, None)
    assert got.drop == tuple(range(2, 11))  # 0-8, covered
    stale = dataclasses.replace(view, outdated=True)
    assert request_memory(stale, SETTINGS, ident, messages, history, unmoved, None).drop == ()


def test_a_merged_turn_is_stepped_away_only_with_every_recap_it_stands_for() -> None:
    """ST sent the chat from 22 on, its 23 and 24 merged into one turn (request index 3,
    matched at its newest position): the step to 25 leaves it out only when the recaps of
    both went in (hunted seed 5698: the checker saw one)."""
    shelf = RecapShelf.of([Candidate(p, 5, f"#{p}: u{p}x") for p in (22, 23, 24)])
    positions = (22, 24, *range(25, 40))
    history = list(range(2, 2 + len(positions)))
    ident = Identification("c", 1.0, "normal", 40, tuple(history), len(history), positions)
    messages = [ChatMessage("system", "x")] * (2 + len(positions))
    assert stands_for(ident)[2] == range(22, 23) and stands_for(ident)[3] == range(23, 25)

    def dropped(room: int) -> tuple[int, ...]:
        view = dataclasses.replace(FOLDED, shelf=shelf, budget=16 + room)
        start = history_start(view, SETTINGS, ident, history)
        assert start[1] == [2, 3]  # the step to 25 would leave both out
        return request_memory(view, SETTINGS, ident, messages, history, start, None).drop

    assert dropped(10) == ()  # only 24's recap goes in: the merged turn stays, and 22
    assert dropped(16) == (3,)  # 23's and 24's go in: the turn leaves; 22 stays
    assert dropped(30) == (2, 3)
