"""The per-request step over a chat's memory view (event loop): the memory's macro values
and the request messages to leave out, and where the history starts. It reads no store but
the scene search (`proxy.store.search`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.entities import cards_within
from proxy.core.models import ChatMessage, Identification
from proxy.core.recaps import budget_tokens
from proxy.core.trim import Cut, droppable, stepped_drop, stepped_start
from proxy.memory.views.recall import Questions, SceneRanker, relevant_scenes
from proxy.memory.views.view import FRAME_TOKENS, MemoryView
from proxy.settings.memory import MemorySettings

# Entities a request's question may bring by meaning, after those its messages name.
ENTITIES_NEAR = 4


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class RequestMemory:
    values: dict[str, str]
    drop: tuple[int, ...]


def request_memory(
    view: MemoryView | None,
    settings: MemorySettings,
    ident: Identification,
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    start: tuple[Cut | None, list[int]],
    model: str | None,
    search: SceneRanker | None = None,
    questions: Questions | None = None,
) -> RequestMemory:
    """The macro values and the request indices to leave out, for one request. `start`:
    where ST cut it and the history's start, with the indices to leave out for that
    (`history_start`)."""
    if view is None:
        return RequestMemory({}, ())
    drop: list[int] = []
    # An outdated view may hold its cutoff by positions from before messages moved or
    # changed: nothing is left out for it until planning builds the next (a request as
    # ST sent it is never worse than one missing a message the recap does not hold).
    if view.cutoff is not None and view.running and not view.outdated:
        # Matched positions rise with the request's order: those past the cutoff are a tail.
        # The request's newest message stays too, covered or not: it is what the model
        # answers (a swipe of the reply a scene break closed on, that scene folded in).
        newer = bisect_right(ident.positions, view.cutoff)
        kept = {*ident.history[newer:], *history[-1:]}
        drop = droppable(messages, history, view.covered, kept)
    cut, stepped = start
    sent_from = cut.start if cut is not None else None
    left = view.budget - view.running_tokens
    budget = budget_tokens(
        settings.message_recap_context_limit,
        settings.message_recap_context_type,
        settings.context_for(model),
    )
    # Conditionals, not `min`: 3.11's parses keywords on every call (per request, here).
    free = left - FRAME_TOKENS
    recap_room = budget if budget < free else free
    recent, spent = view.shelf.newest(sent_from, recap_room)
    if stepped:
        # A message is stepped away for the recaps that stand in for it: one with a recap
        # the budget leaves out (a long running recap leaves little room) stays.
        spans = stands_for(ident)
        known = [p for i in stepped for p in spans.get(i, ())]
        short = view.shelf.left_out_of(known, sent_from, recap_room)
        if short:
            stepped = [i for i in stepped if not short.intersection(spans.get(i, ()))]
        drop = sorted({*drop, *stepped})
    if recent:
        left -= FRAME_TOKENS + spent
    # The entities the newest messages name come before recalled scenes: a card is a few
    # lines of what a whole scene would tell of one of them.
    entities, spent = _named_cards(view, settings, messages, history, left, questions)
    if entities:
        left -= FRAME_TOKENS + spent
    scenes = ""
    room = settings.relevant_scenes_max_tokens
    if room > left - FRAME_TOKENS:
        room = left - FRAME_TOKENS
    if search is not None and view.scenes and room > 0:
        # The oldest chat position still in the prompt once covered history is left out.
        before = sent_from
        if drop and view.cutoff is not None:
            before = max(before or 0, view.cutoff + 1)
        scenes = relevant_scenes(
            search, view, ident.chat_id, messages, history, settings, before, room, questions
        )
    values = {
        "running_recap": view.running,
        "recent_recaps": recent,
        "relevant_scenes": scenes,
        "entities": entities,
    }
    return RequestMemory(values, tuple(drop))


def note_cut(
    settings: MemorySettings, cuts: dict[str, Cut], ident: Identification, cut: Cut | None
) -> bool:
    """Keep where ST cut the chat (the oldest message its request still carries) in
    `cuts`: with `message_recaps = "needed"`, the messages before it are the ones to
    recap. Whether it moved past ST's start (the chat is then to be planned again)."""
    if settings.message_recaps != "needed" or ident.generation == "quiet":
        return False
    if cut is None or cuts.get(ident.chat_id) == cut:
        return False
    cuts[ident.chat_id] = cut
    return cut.st > 0


def stands_for(ident: Identification) -> dict[int, range]:
    """The chat positions each matched request message stands for: its own, and, for a
    turn ST merged (`proxy.identify.readings.MESSAGE`, matched at its newest position),
    those since the matched message before it. Positions between that ST did not send
    (hidden ones) have no recap to check."""
    spans: dict[int, range] = {}
    before: int | None = None
    for index, position in zip(ident.history, ident.positions, strict=False):
        spans[index] = range(position if before is None else before + 1, position + 1)
        before = position
    return spans


def _named_cards(
    view: MemoryView,
    settings: MemorySettings,
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    left: int,
    questions: Questions | None = None,
) -> tuple[str, int]:
    """`{{entities}}`: the cards of the entities the request's newest chat messages name,
    the most recently named first, then (with embeddings) those nearest the user's last
    message by meaning, within `entities_max_tokens` and what the memory's budget has
    `left`; and their tokens."""
    room = settings.entities_max_tokens
    if room > left - FRAME_TOKENS:
        room = left - FRAME_TOKENS
    if view.mentions is None or room <= 0 or not history:
        return "", 0
    newest = [messages[i].text for i in history[-settings.entities_context :]]
    named = view.mentions.newest_first(newest)
    if questions is not None and view.entity_vectors is not None:
        users = [messages[i].text for i in history if messages[i].role == "user"]
        question = questions.vector_for(users[-1]) if users else None
        if question is not None:
            floor = settings.embeddings.min_similarity
            near = view.entity_vectors.nearest(question, ENTITIES_NEAR, floor)
            named += [i for i in near if i not in named]
    return cards_within(view.cards, named, room) if named else ("", 0)


def history_start(
    view: MemoryView | None,
    settings: MemorySettings,
    ident: Identification,
    history: Sequence[int],
) -> tuple[Cut | None, list[int]]:
    """Where ST cut a request and where its history is to start (None: no history
    identified), and the request indices to leave out for that: ST's cut moved on in steps
    of `history_cut_step` (`proxy.core.trim.stepped_start`) unless trimming's own cut holds
    the history's start still already. As with trimming, only once the chat has a running
    recap: the memory's part that goes with left-out history, and never with trimming off
    (`auto_hide_scene_count = -1`: nothing is left out). ST's cut stays the start when its
    messages cannot be left out (`stepped_drop`).

    A message ST sent is never stepped away while it lacks the recap that stands in for it
    (`MemoryView.held`): the start stops before it, and the cut's `aim` (the step's
    start) tells planning to write that recap now. Nor while the view is `outdated`: its
    positions may be off by the messages deleted or added since, and a message stepped
    away by them could lose the recap standing in for it."""
    cut = present_from(ident, history)
    if cut is None:
        return None, []
    unmoved: tuple[Cut, list[int]] = (Cut(cut, cut, cut), [])
    if view is None or not view.running or not settings.stepped_history or view.outdated:
        return unmoved
    step = settings.history_cut_step
    aim = stepped_start(cut, step, view.cutoff)
    if aim is None or aim <= cut:
        return unmoved
    held = view.held(cut)
    start = aim if held is None or aim <= held else held
    stepped = stepped_drop(history, ident.history, ident.positions, start, step)
    return (Cut(cut, start, aim), stepped) if stepped else (Cut(cut, cut, aim), [])


def present_from(ident: Identification, history: Sequence[int]) -> int | None:
    """The oldest chat position the request (probably) carries: its oldest matched message,
    less the unmatched history messages before it."""
    if not ident.positions:
        return None
    # `history` is in request order: those before the first matched one, by bisection.
    before = bisect_left(history, ident.history[0])
    return ident.positions[0] - before
