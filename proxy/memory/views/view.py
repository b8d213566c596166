"""What the chat path reads of a chat's memory: a view rebuilt off the request path after
every change (running recap text, covered messages' fingerprints, injectable message
recaps, the scenes recall may offer), and the per-request step over it, which reads no
store but the scene search (`proxy.store.search`).

The whole inserted memory has a budget (`[memory] max_memory_tokens`, the injection
template's own text included). The running recap comes first; the recaps of messages ST
cut and the running recap does not cover yet come next; then the cards of the entities the
newest messages name (at most `entities_max_tokens`); the older scenes recalled for what
is happening now get what is left (at most `relevant_scenes_max_tokens`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from proxy.core.entities import Entity, Mentions, capped
from proxy.core.fingerprints import index_message
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
    exclusion,
)
from proxy.core.tokens import TokenCounter
from proxy.core.trim import Covered, trim_cutoff
from proxy.core.vectors import VectorSet, stacked
from proxy.memory.chatinfo import PersonaLookup, chat_names, swipe_of
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.store.records import SceneBreak, SceneRecap

# Part headings and blank lines between the parts, reserved from the budget.
FRAME_TOKENS = 16
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
    # The story's entities (`proxy.core.entities`), each card with its tokens, and the
    # matcher of their names: built when the registry changes.
    entities: tuple[Entity, ...] = ()
    cards: tuple[tuple[str, int], ...] = ()
    mentions: Mentions | None = None
    # Recall by meaning (`[memory.embeddings]`): the scenes' vectors (by break uid), the
    # entity cards' (by index in `entities`), and the texts (each with its hash) not
    # embedded yet, which the embedder takes up after planning.
    vectors: VectorSet | None = None
    entity_vectors: VectorSet | None = None
    unembedded: tuple[tuple[str, str], ...] = ()
    embedded_by: str = ""  # the model they are of (`EmbeddingSettings.identity`)
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


@dataclass(frozen=True, slots=True)
class Frame:
    """What the injection template takes itself: its own text's tokens (from the memory's
    budget), and the macros it fills (a part it does not use is never built or searched)."""

    tokens: int = 0
    macros: frozenset[str] = frozenset(
        {"running_recap", "relevant_scenes", "recent_recaps", "entities"}
    )


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
    reuse = covered_reuse(old.cutoff, cutoff, since) if old is not None else None
    if old is not None and reuse == KEEP:
        covered = old.covered
    elif old is not None and reuse is not None:
        covered = _covered(db, inputs, chat_id, cutoff, reuse, old.covered)
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
        scenes = scene_cards(memory.scene_cards(chat_id), known, count, prime)
        vocabulary = vocabulary_of(scenes, old)
    entities, cards, mentions = _entities(db, inputs, chat_id, old)
    vectors, entity_vectors, unembedded = _vectors(db, inputs, scenes, vocabulary, cards, old)
    names = chat_names(db, chat_id, inputs.persona)
    shelf = RecapShelf.of(recaps)
    for text in new_texts(running, shelf, old):
        prime(text)
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
        entities=entities,
        cards=cards,
        mentions=mentions,
        vectors=vectors,
        entity_vectors=entity_vectors,
        unembedded=unembedded,
        embedded_by=settings.embeddings.identity() if settings.embeddings.enabled else "",
        file_hash=chat.file_hash if chat is not None else None,
    )


def _entities(
    db: Database, inputs: ViewInputs, chat_id: str, old: MemoryView | None
) -> tuple[tuple[Entity, ...], tuple[tuple[str, int], ...], Mentions | None]:
    """The chat's entities, their cards (each within `entities_max_tokens`, counted and
    primed here, off the request path) and the matcher of their names; the old view's
    when the registry is as it was (the matcher is an automaton: built once per change)."""
    settings = inputs.settings
    if not settings.entities_max_tokens or "entities" not in inputs.frame.macros:
        return (), (), None
    entities = tuple(e for e in db.entities.registry(chat_id) if not e.deleted)
    if old is not None and old.entities == entities and old.mentions is not None:
        return entities, old.cards, old.mentions
    if not entities:
        return (), (), None
    budget, count = settings.entities_max_tokens, inputs.counter.count
    cards = tuple(capped(entity, budget, count) for entity in entities)
    for line, _ in cards:
        if line:
            inputs.counter.prime(line)
    return entities, cards, Mentions(entities)


def _vectors(
    db: Database,
    inputs: ViewInputs,
    scenes: dict[int, SceneCard],
    vocabulary: Vocabulary,
    cards: tuple[tuple[str, int], ...],
    old: MemoryView | None,
) -> tuple[VectorSet | None, VectorSet | None, tuple[tuple[str, str], ...]]:
    """The scenes' and the entity cards' vectors (the old view's while what they embed is
    the same and was all embedded), and the texts (with their hashes) that have none yet."""
    embeddings = inputs.settings.embeddings
    if not embeddings.enabled:
        return None, None, ()
    same = old is not None and old.embedded_by == embeddings.identity() and not old.unembedded
    if same and old is not None and old.vocabulary is vocabulary and old.cards == cards:
        return old.vectors, old.entity_vectors, ()
    texts = {("s", uid): card.entry for uid, card in scenes.items()}
    texts.update({("e", i): line for i, (line, _) in enumerate(cards) if line})
    hashes = {key: text_hash(text) for key, text in texts.items()}
    found = db.vectors.get(embeddings.identity(), list(dict.fromkeys(hashes.values())))

    def of(kind: str) -> VectorSet | None:
        keys = [key for key in texts if key[0] == kind and hashes[key] in found]
        if not any(key[0] == kind for key in texts):
            return None
        return stacked([i for _, i in keys], [found[hashes[key]] for key in keys])

    missing = {hashes[key]: text for key, text in texts.items() if hashes[key] not in found}
    return of("s"), of("e"), tuple(missing.items())


# `covered_reuse`: the old view's covered messages hold as they are.
KEEP = -1


def covered_reuse(before: int | None, cutoff: int | None, since: int | None) -> int | None:
    """What a view rebuilt after a change from position `since` on (None: no message
    changed) keeps of its old view's covered messages (through `before`), the new one
    covering through `cutoff`: `KEEP` (all, as they are), the position to read on from
    (they hold, and more are covered), or None (read them again whole)."""
    if since is not None and since <= (before if before is not None else -1):
        return None  # a covered message changed
    if before == cutoff:
        return KEEP
    if before is not None and cutoff is not None and cutoff > before:
        return before + 1
    return None


def scene_cards(
    rows: Iterable[tuple[SceneBreak, SceneRecap]],
    known: Mapping[int, SceneCard],
    count: Callable[[str], int],
    prime: Callable[[str], object],
) -> dict[int, SceneCard]:
    """The finished scenes as recall offers them, by break uid: a card of `known` (the
    old view's) is kept as it is while its scene is unchanged; a new or changed one is
    counted, and its text primed as `{{relevant_scenes}}` holds it."""
    scenes: dict[int, SceneCard] = {}
    for scene, recap in rows:
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
    return scenes


def vocabulary_of(scenes: Mapping[int, SceneCard], old: MemoryView | None) -> Vocabulary:
    """The words of the scenes' recaps: the old view's when its cards are all kept (by
    identity: planning tells a change of a chat's scenes that way)."""
    if (
        old is not None
        and old.scenes.keys() == scenes.keys()
        and all(old.scenes[uid] is card for uid, card in scenes.items())
    ):
        return old.vocabulary
    return Vocabulary.of(card.words for card in scenes.values())


def new_texts(running: str, shelf: RecapShelf, old: MemoryView | None) -> list[str]:
    """The texts a request will count that the old view did not hold, as the macros hold
    them: the running recap, and the recap lines new on the shelf."""
    texts = []
    if running and (old is None or old.running != running):
        texts.append(running + "\n")
    counted = set(old.shelf.lines) if old is not None else set()
    fresh = [line for line in shelf.lines if line not in counted]
    if fresh:
        texts.append("\n".join(fresh) + "\n")  # `{{recent_recaps}}`: one recap a line
    return texts


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
