"""What the chat path reads of a chat's memory: a view rebuilt off the request path after
every change (running recap text, covered messages' fingerprints, injectable message
recaps, the scenes recall may offer), and the per-request step over it, which reads no
store but the scene search (`proxy.store.search`).

The whole inserted memory has a budget (`[memory] max_memory_tokens`, the injection
template's own text included). The running recap comes first; the recaps of messages ST
cut and the running recap does not cover yet come next; the older scenes recalled for
what is happening now get what is left (at most `relevant_scenes_max_tokens`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.core.fingerprints import index_message
from proxy.core.models import ChatMessage, Identification
from proxy.core.recall import (
    SceneCard,
    Vocabulary,
    scene_entry,
    words_of,
)
from proxy.core.recaps import (
    SEPARATOR_TOKENS,
    Candidate,
    RecapRules,
    RecapShelf,
    budget_tokens,
    exclusion,
)
from proxy.core.tokens import TokenCounter
from proxy.core.trim import Covered, Cut, droppable, stepped_drop, stepped_start, trim_cutoff
from proxy.memory.chatinfo import PersonaLookup, chat_names, swipe_of
from proxy.memory.views.recall import SceneRanker, relevant_scenes
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database

NO_WORDS = Vocabulary()  # one value: planning tells a change of a chat's scenes by identity


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What the chat path needs of one chat's memory, computed off the request path."""

    running: str = ""
    running_version: int | None = None
    covered_through: int | None = None  # newest position the running recap covers
    cutoff: int | None = None  # newest position that may be left out of requests
    covered: Covered = field(default_factory=lambda: Covered(()))
    # The recaps of uncovered messages, oldest first, ready for the chat path.
    shelf: RecapShelf = field(default_factory=RecapShelf)
    # Uncovered messages that are to get a recap and have none yet, oldest first, and the
    # uncovered ones not looked at (older than planning's `message_recap_lookback`): the
    # history's stepped start leaves out none of them (`held`).
    lacking: tuple[int, ...] = ()
    unscanned: range = range(0)
    running_tokens: int = 0
    scenes: dict[int, SceneCard] = field(default_factory=dict)  # break uid -> scene
    names: tuple[str, ...] = ()  # the chat's character and user names
    vocabulary: Vocabulary = field(default_factory=lambda: NO_WORDS)  # of its scene recaps
    budget: int = 0  # tokens the memory's macros may fill (the template's text aside)
    # The chat file's hash in the store the view was built from; `outdated`: the chat was
    # re-read since, with messages before its newest deleted, added, hidden or changed
    # (`moved_older`), and the view could not be moved with them (`reread.carried`): what
    # is held here by position may be of other messages than the file's until the next.
    file_hash: bytes | None = None
    outdated: bool = False

    def held(self, cut: int) -> int | None:
        """The first chat position from `cut` on that the history's stepped start must not
        pass: a message with nothing to stand in for it yet (None: no such message)."""
        if self.unscanned and cut < self.unscanned.stop:
            return max(cut, self.unscanned.start)
        found = bisect_left(self.lacking, cut)
        return self.lacking[found] if found < len(self.lacking) else None


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class RequestMemory:
    values: dict[str, str]
    drop: tuple[int, ...]


# Part headings and blank lines between the parts, reserved from the budget.
FRAME_TOKENS = 16


def request_memory(
    view: MemoryView | None,
    settings: MemorySettings,
    ident: Identification,
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    start: tuple[Cut | None, list[int]],
    model: str | None,
    search: SceneRanker | None = None,
) -> RequestMemory:
    """The macro values and the request indices to leave out, for one request. `start`:
    where ST cut it and the history's start, with the indices to leave out for that
    (`history_start`)."""
    if view is None:
        return RequestMemory({}, ())
    drop: list[int] = []
    if view.cutoff is not None and view.running:
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
        # A message is stepped away for the recap that stands in for it: one whose recap
        # the budget leaves out (a long running recap leaves little room) stays.
        place = dict(zip(ident.history, ident.positions, strict=False))
        known = (place[i] for i in stepped if i in place)
        short = view.shelf.left_out_of(known, sent_from, recap_room)
        if short:
            stepped = [i for i in stepped if place.get(i) not in short]
        drop = sorted({*drop, *stepped})
    if recent:
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
            search, view, ident.chat_id, messages, history, settings, before, room
        )
    values = {
        "running_recap": view.running,
        "recent_recaps": recent,
        "relevant_scenes": scenes,
    }
    return RequestMemory(values, tuple(drop))


@dataclass(frozen=True, slots=True)
class Frame:
    """What the injection template takes itself: its own text's tokens (from the memory's
    budget), and the macros it fills (a part it does not use is never built or searched)."""

    tokens: int = 0
    macros: frozenset[str] = frozenset({"running_recap", "relevant_scenes", "recent_recaps"})


@dataclass(frozen=True, slots=True)
class ViewInputs:
    """What building a view needs besides the store."""

    settings: MemorySettings
    counter: TokenCounter
    persona: PersonaLookup
    frame: Frame = Frame()


def build_view(
    db: Database,
    inputs: ViewInputs,
    chat_id: str,
    old: MemoryView | None,
    since: int | None = None,
) -> MemoryView:
    """A chat's view, rebuilt after planning (store thread). `old` is the view it
    replaces: its covered fingerprints are kept when nothing before the cutoff changed."""
    memory = db.memory
    count = inputs.counter.count
    # The text a request will count, counted here (store thread) as the memory parts will
    # hold it, so that the request finds it in the counter's caches (`TokenCounter.prime`).
    prime = inputs.counter.prime
    settings = inputs.settings
    current = memory.current_running(chat_id)
    through = memory.position_of(current.new_scene_uid) if current else None
    budget = max(0, settings.max_memory_tokens - inputs.frame.tokens - FRAME_TOKENS)
    running = fit_lines(current.content, budget, count) if current else ""
    breaks = [b.position for b in memory.breaks(chat_id) if b.visible]
    cutoff = trim_cutoff(breaks, through, inputs.settings.auto_hide_scene_count)
    # What the old view covered still holds when nothing up to its cutoff changed: kept
    # as it is, or grown by the messages up to the new cutoff.
    before = old.cutoff if old is not None else None
    if old is None or (since is not None and since <= (before or -1)):
        covered = _covered(db, inputs, chat_id, cutoff)
    elif before == cutoff:
        covered = old.covered
    elif before is not None and cutoff is not None and cutoff > before:
        covered = _covered(db, inputs, chat_id, cutoff, before + 1, old.covered)
    else:
        covered = _covered(db, inputs, chat_id, cutoff)
    chat = db.chat(chat_id)
    first = scan = (through or -1) + 1
    stepping = current is not None and settings.stepped_history
    if stepping:
        # Planning recaps only the newest `message_recap_lookback` messages by itself: the
        # uncovered ones before those are not read one by one (a backfill plans after every
        # job), and hold the stepped start as if none had its recap.
        total = chat.messages if chat is not None else 0
        scan = max(first, total - settings.message_recap_lookback)
    recaps, lacking = _stand_ins(
        db, chat_id, first, scan, count, settings.recap_rules() if stepping else None
    )
    scenes: dict[int, SceneCard] = {}
    vocabulary = NO_WORDS
    if settings.relevant_scenes_max_tokens and "relevant_scenes" in inputs.frame.macros:
        known = old.scenes if old is not None else {}
        for scene, recap in memory.scene_cards(chat_id):
            name = scene.name or recap.scene_name or ""
            card = known.get(scene.uid)
            if card is None or (card.last, card.name, card.recap) != (
                scene.position,
                name,
                recap.recap,
            ):
                entry = scene_entry(name, recap.recap)
                tokens = count(entry) + SEPARATOR_TOKENS
                prime(entry + "\n\n")  # as `{{relevant_scenes}}` holds it: a blank line after
                words = words_of(f"{name} {recap.recap}")
                card = SceneCard(scene.uid, scene.position, name, recap.recap, tokens, words)
            scenes[scene.uid] = card
        same = (
            old is not None
            and old.scenes.keys() == scenes.keys()
            and all(old.scenes[uid] is card for uid, card in scenes.items())
        )
        if same and old is not None:
            vocabulary = old.vocabulary
        else:
            vocabulary = Vocabulary.of(card.words for card in scenes.values())
    names = chat_names(db, chat_id, inputs.persona)
    if running and (old is None or old.running != running):
        prime(running + "\n")
    shelf = RecapShelf.of(recaps)
    counted = set(old.shelf.lines) if old is not None else set()
    fresh = [line for line in shelf.lines if line not in counted]
    if fresh:
        prime("\n".join(fresh) + "\n")  # `{{recent_recaps}}`: one recap a line
    return MemoryView(
        running=running,
        running_version=current.version if current else None,
        covered_through=through,
        cutoff=cutoff,
        covered=covered,
        shelf=shelf,
        lacking=tuple(lacking),
        unscanned=range(first, scan),
        running_tokens=count(running),
        scenes=scenes,
        names=(names["char"], names["user"]),
        vocabulary=vocabulary,
        budget=budget,
        file_hash=chat.file_hash if chat is not None else None,
    )


def fit_lines(text: str, budget: int, count: Callable[[str], int]) -> str:
    """`text` within `budget` tokens: whole lines from the top go first (the oldest
    developments), as a running recap too long for the whole memory's budget would."""
    if count(text) <= budget:
        return text
    lines = text.splitlines()
    while lines and count("\n".join(lines)) > budget:
        lines.pop(0)
    return "\n".join(lines)


def _stand_ins(
    db: Database,
    chat_id: str,
    first: int,
    scan: int,
    count: Callable[[str], int],
    rules: RecapRules | None,
) -> tuple[list[Candidate], list[int]]:
    """The current message recaps of the uncovered messages (from `first` on), and with
    `rules` (the history is stepped) the messages from `scan` on that are to get one and
    have none yet."""
    memory = db.memory
    stored = memory.message_recaps(chat_id)
    recaps: list[Candidate] = []
    lacking: list[int] = []
    if not stored and rules is None:
        return recaps, lacking
    excluded = memory.excluded(chat_id)
    for record in memory.messages_from(chat_id, first if stored else scan):
        done = stored.get((record.uid, swipe_of(record)))
        if done is not None and (done.edited or done.source_hash == text_hash(record.message.mes)):
            if record.uid not in excluded and not record.message.hidden:
                recaps.append(Candidate(record.position, count(done.recap), done.recap))
        elif rules is not None and record.position >= scan:
            tokens = count(record.message.mes)
            if not exclusion(record.message, tokens, rules, user_excluded=record.uid in excluded):
                lacking.append(record.position)
    return recaps, lacking


def _covered(
    db: Database,
    inputs: ViewInputs,
    chat_id: str,
    cutoff: int | None,
    first: int = 0,
    before: Covered | None = None,
) -> Covered:
    """The covered messages through `cutoff`; with `before` (those up to `first`), only
    the messages from `first` on are read and fingerprinted."""
    if cutoff is None:
        return Covered(())
    chat = db.chat(chat_id)
    names = chat_names(db, chat_id, inputs.persona)
    visible = db.memory.visible_through(chat_id, cutoff, first)
    # A group's {{char}} is whoever speaks; a character chat's, its character.
    char = chat.display_name if chat is not None and chat.kind != "group" else ""
    fps = [
        index_message(p, is_user, name, text, char=char or name, user=names["user"]).fps
        for p, is_user, name, text in visible
    ]
    texts = [text for *_, text in visible]
    return before.extended(fps, texts) if before is not None else Covered.of(fps, texts)


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
