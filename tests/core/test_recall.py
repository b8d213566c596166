"""Recalling older scenes: search terms, the choice within a budget, the text."""

from __future__ import annotations

from proxy.core.recall import (
    HEADING,
    MAX_TERMS,
    SceneCard,
    Vocabulary,
    match_query,
    pick_scenes,
    render_scenes,
    search_terms,
    words_of,
)


def vocabulary_of(*texts: str) -> Vocabulary:
    return Vocabulary.of(words_of(text) for text in texts)


WORDS = vocabulary_of(
    "Ava hid the brass key under the mill in room 42.",
    "Tom shows the map.",
    "The storm passes; Tom keeps watch.",
)


def test_terms_are_words_a_scene_holds_newest_first_without_names() -> None:
    texts = [
        "Ava shows Tom the Brass Key she found at the mill.",
        "Tom: Where did you hide the brass keys, Ava? It's room 42 I need, and a boat.",
    ]
    terms = search_terms(texts, WORDS, ignore=["Ava", "Tom Miller"])
    # The newest message's words lead; stop words, names, short words and words no scene
    # holds ("hide", "boat") are gone; "keys" is asked for as a scene says "key".
    assert terms == ["brass", "keys", "room", "42", "shows", "mill"]
    assert search_terms(texts, WORDS, rarest=True, limit=2) == ["brass", "keys"]


def test_a_word_in_many_scenes_ranks_nothing() -> None:
    scenes = [f"The forest at dawn, scene {i}." for i in range(20)] + ["The silver compass."]
    words = vocabulary_of(*scenes)
    assert words.scenes == 21 and words.weight("forest") is None
    assert words.weight("compass") == 1 and words.weight("compasses") is None
    assert search_terms(["Where is the silver compass in the forest?"], words) == [
        "silver",
        "compass",
    ]
    # A short chat has no common words yet: every scene's words may rank.
    assert vocabulary_of("The forest.", "The forest again.").weight("forest") == 2


def test_terms_are_bounded_and_quoted_safely() -> None:
    many = " ".join(f"word{i}" for i in range(100))
    assert len(search_terms([many], vocabulary_of(many))) == MAX_TERMS
    # FTS5 syntax in a chat message is searched as words, never run as a query.
    syntax = 'NEAR("a" OR b) AND NOT * col:x'
    assert search_terms([syntax], vocabulary_of("near col")) == ["near", "col"]
    assert match_query(["near", "col"]) == '"near" OR "col"'
    assert match_query([]) == ""


def card(uid: int, last: int, tokens: int) -> SceneCard:
    return SceneCard(uid, last, f"Scene {uid}", f"recap {uid}", tokens)


def test_best_ranked_scenes_that_fit_in_story_order() -> None:
    cards = {uid: card(uid, uid * 10, tokens) for uid, tokens in [(1, 50), (2, 300), (3, 80)]}
    cards[4] = card(4, 200, 10)
    # Ranked 2, 3, 1: 2 does not fit in 150 and is passed over for the smaller ones.
    chosen = pick_scenes([2, 3, 1, 99], cards, before=None, budget=150)
    assert [c.uid for c in chosen] == [1, 3]
    # Never a scene still in the prompt (ending at or after `before`).
    assert [c.uid for c in pick_scenes([4, 1], cards, before=200, budget=500)] == [1]
    assert pick_scenes([1], cards, before=None, budget=0) == []


def test_rendered_under_a_heading_with_names() -> None:
    text = render_scenes([card(1, 10, 5), SceneCard(2, 20, "", "unnamed recap", 5)])
    assert text == f"{HEADING}\n\n[Scene 1] recap 1\n\nunnamed recap"
    assert render_scenes([]) == ""
