"""Building a chat's memory view, part by part: what of the old view it keeps, the scene
cards recall offers, and the texts it primes for the next request's counting."""

from __future__ import annotations

from dataclasses import replace

from proxy.core.entities import Mention
from proxy.core.recall import Vocabulary
from proxy.core.recaps import Candidate, RecapShelf
from proxy.core.tokens import TokenCounter
from proxy.memory.views.view import (
    KEEP,
    Frame,
    MemoryView,
    ViewInputs,
    _entities,
    covered_reuse,
    new_texts,
    scene_cards,
    vocabulary_of,
)
from proxy.settings.memory import MemorySettings
from proxy.store.records import SceneBreak, SceneRecap
from tests.store.test_search import CHAT, story


def scene(
    uid: int, position: int, recap: str, name: str | None = None
) -> tuple[SceneBreak, SceneRecap]:
    return (
        SceneBreak(uid, position, "llm", True, name, False, None, 1),
        SceneRecap(uid, 1, "The cave", recap, None, "llm", 0.0),
    )


def test_covered_messages_are_kept_while_none_of_them_changed() -> None:
    assert covered_reuse(20, 20, None) == KEEP  # nothing changed, same cutoff
    assert covered_reuse(20, 20, 21) == KEEP  # a change past the covered ones
    assert covered_reuse(20, 35, 30) == 21  # they hold, and 21-35 are read on
    assert covered_reuse(20, 20, 20) is None  # the newest covered one changed
    assert covered_reuse(20, 12, None) is None  # the cutoff went back: read again
    assert covered_reuse(None, 12, None) is None  # nothing covered before
    assert covered_reuse(None, None, None) == KEEP
    # Position 0 covered and changed: read again (it was taken as "nothing covered").
    assert covered_reuse(0, 0, 0) is None


def test_a_scene_card_is_made_once_and_kept_while_its_scene_is_unchanged() -> None:
    primed: list[str] = []
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    rows = [scene(8, 8, "Ava and Tom reach the cave.", "Arrival"), scene(17, 17, "They rest.")]
    first = scene_cards(rows, {}, count, primed.append)
    assert [(c.uid, c.last, c.name) for c in first.values()] == [
        (8, 8, "Arrival"),
        (17, 17, "The cave"),  # no name of its own: the recap's
    ]
    assert primed == [c.entry + "\n\n" for c in first.values()]
    assert "cave" in first[8].words and first[8].tokens > count(first[8].entry)
    primed.clear()
    again = scene_cards(rows, first, count, primed.append)
    assert all(again[uid] is first[uid] for uid in first) and primed == []
    # The recap of the second scene is edited: that card alone is made again.
    rows[1] = scene(17, 17, "They rest by the fire.")
    edited = scene_cards(rows, first, count, primed.append)
    assert edited[8] is first[8] and edited[17] is not first[17]
    assert primed == [edited[17].entry + "\n\n"]


def test_the_vocabulary_is_kept_while_every_card_is() -> None:
    rows = [scene(8, 8, "Ava and Tom reach the cave.")]
    cards = scene_cards(rows, {}, lambda text: 1, lambda text: None)
    old = MemoryView(scenes=cards, vocabulary=Vocabulary.of(c.words for c in cards.values()))
    assert vocabulary_of(dict(cards), old) is old.vocabulary
    more = scene_cards([scene(17, 17, "A storm.")], {}, lambda text: 1, lambda text: None)
    grown = {**cards, **more}
    assert vocabulary_of(grown, old) is not old.vocabulary
    assert vocabulary_of(cards, None) is not old.vocabulary


def test_only_texts_the_old_view_did_not_hold_are_primed() -> None:
    shelf = RecapShelf.of([Candidate(30, 5, "Ava lights a fire."), Candidate(31, 4, "Tom sleeps.")])
    assert new_texts("", RecapShelf(), None) == []
    assert new_texts("The story so far.", shelf, None) == [
        "The story so far.\n",
        "\n".join(shelf.lines) + "\n",
    ]
    old = MemoryView(
        running="The story so far.", shelf=RecapShelf.of([Candidate(30, 5, "Ava lights a fire.")])
    )
    assert new_texts("The story so far.", shelf, old) == [shelf.lines[1] + "\n"]
    assert new_texts("The story so far.", old.shelf, replace(old)) == []


def test_the_entities_cards_are_made_when_the_registry_changes() -> None:
    db, uids = story(":memory:")
    aldric = Mention("Aldric", "character", (), ("Keeps the ledger.", "Owes Tom a favour."))
    db.entities.add(CHAT, uids[0], 1, [aldric])
    counted: list[str] = []

    def words(text: str) -> int:
        counted.append(text)
        return len(text.split())

    counter = TokenCounter(words)
    inputs = ViewInputs(MemorySettings(entities_max_tokens=8), counter, lambda user: "Tom")
    entities, cards, mentions = _entities(db, inputs, CHAT, None)
    # Each card within the budget: over it, the newest facts that fit.
    assert cards == (("- Aldric (character): Owes Tom a favour.", 7),)
    assert mentions is not None and mentions.newest_first(["Ask aldric."]) == [0]
    # The registry as it was: the old view's cards and matcher, nothing counted again.
    old = MemoryView(entities=entities, cards=cards, mentions=mentions)
    counted.clear()
    assert _entities(db, inputs, CHAT, old)[2] is mentions and counted == []
    # A change (the scene recapped again, naming no one): none left.
    db.memory.add_scene_recap(CHAT, uids[0], "Again.", 0.0, scene_name=None, source="llm")
    assert _entities(db, inputs, CHAT, old) == ((), (), None)
    # Not asked for: the template has no {{entities}}, or its budget is 0.
    db.entities.add(CHAT, uids[1], 1, [aldric])
    off = ViewInputs(MemorySettings(entities_max_tokens=0), counter, lambda user: "Tom")
    assert _entities(db, off, CHAT, None) == ((), (), None)
    unused = ViewInputs(inputs.settings, counter, lambda user: "Tom", Frame(0, frozenset()))
    assert _entities(db, unused, CHAT, None) == ((), (), None)
