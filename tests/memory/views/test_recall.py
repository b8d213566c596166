"""Older scenes recalled on the chat path (`proxy.memory.views.recall`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from proxy.core.fingerprints import normalize
from proxy.core.models import ChatMessage
from proxy.core.recall import SceneCard, Vocabulary, words_of
from proxy.core.vectors import stacked, unit
from proxy.memory.views import recall
from proxy.memory.views.recall import CONTEXT_CHARS, rank_scenes, ranking, relevant_scenes
from proxy.memory.views.view import MemoryView
from proxy.settings.memory import MemorySettings
from tests.spies import spy

SETTINGS = MemorySettings()


class CountingSearch:
    """A scene search that ranks every scene and counts the questions."""

    def __init__(self) -> None:
        self.asked = 0

    def ranked(self, chat_id: str, query: str, limit: int, min_score: float) -> list[int]:
        self.asked += 1
        return [1, 2]


def scenes_view(recap: str) -> MemoryView:
    cards = {
        uid: SceneCard(uid, uid * 10, f"S{uid}", f"{recap} {uid}", 5, words_of(f"{recap} mill"))
        for uid in (1, 2)
    }
    return MemoryView(
        running="x",
        scenes=cards,
        vocabulary=Vocabulary.of(c.words for c in cards.values()),
        names=("Seraphina", "Arden"),
    )


def test_relevant_scenes_are_searched_once_per_question() -> None:
    """A swipe asks again what the last request asked: the answer is the one given, until
    the chat's scenes or the recent messages change."""
    search = CountingSearch()
    messages = [ChatMessage("user", "The mill burned."), ChatMessage("assistant", "Smoke rose.")]
    view = scenes_view("They met at the mill")

    def ask(view: MemoryView, messages: list[ChatMessage]) -> str:
        return relevant_scenes(search, view, "c", messages, [0, 1], SETTINGS, None, 100)

    first = ask(view, messages)
    assert "They met at the mill 1" in first and search.asked
    asked = search.asked
    assert ask(view, [ChatMessage(m.role, m.text) for m in messages]) == first
    assert search.asked == asked
    changed = scenes_view("They fled the mill")  # a scene recap rewritten: new vocabulary
    assert "They fled the mill 1" in ask(changed, messages) and search.asked > asked
    asked = search.asked
    ask(changed, [*messages[:1], ChatMessage("assistant", "Everyone fled the mill.")])
    assert search.asked > asked


def test_a_message_asks_the_same_whatever_its_whitespace() -> None:
    """The index keeps a chat's messages with their whitespace folded, and the scenes are
    ranked from that copy when ST saves (`MemoryEngine.foresee`): the request, which
    carries the text as written, must ask the very same questions to find those answers."""
    words = [f"w{i}" for i in range(400)]
    recaps = {uid: " ".join(words[uid::7]) for uid in range(1, 8)}
    cards = {
        uid: SceneCard(uid, uid * 10, f"S{uid}", recap, 5, words_of(recap))
        for uid, recap in recaps.items()
    }
    view = MemoryView(
        running="x",
        scenes=cards,
        vocabulary=Vocabulary.of(c.words for c in cards.values()),
        names=("Seraphina", "Arden"),
    )
    # Longer than the tail that is read, in paragraphs, with runs of spaces.
    written = "\n\n".join("  ".join(words[i : i + 9]) for i in range(0, 400, 9))
    assert len(normalize(written)) > CONTEXT_CHARS
    questions: list[list[str]] = []
    for text in (written, normalize(written)):
        search = RecordingSearch()
        rank_scenes(
            search, view, "c", [ChatMessage("user", "w3 w5"), ChatMessage("assistant", text)]
        )
        questions.append(search.queries)
    assert questions[0] == questions[1] and questions[0]


class RecordingSearch:
    def __init__(self) -> None:
        self.queries: list[str] = []

    def ranked(self, chat_id: str, query: str, limit: int, min_score: float) -> list[int]:
        self.queries.append(query)
        return []


def test_the_ranking_made_from_the_files_copy_is_the_one_the_request_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When ST saves, the scenes are ranked from the index's copy of the newest messages
    (whitespace folded); the request carries them as written, and finds that ranking by
    their fingerprints: it works out no search terms of its own."""
    view = scenes_view("They met at the mill")
    written = [
        ChatMessage("assistant", "Smoke  rose over\n\nthe mill."),
        ChatMessage("user", "Who   burned\nthe mill?"),
    ]
    folded = [ChatMessage(m.role, normalize(m.text)) for m in written]
    search = RecordingSearch()
    foreseen = ranking(search, view, "c", folded)
    worked = spy(monkeypatch, recall, "search_terms")
    assert ranking(search, view, "c", written) == foreseen
    assert worked == []
    # Other words are another question.
    ranking(search, view, "c", [*written[:1], ChatMessage("user", "Who saw the fire?")])
    assert worked


class Ready:
    """The embedder, as a request sees it: a question's vector, or none yet."""

    def __init__(self) -> None:
        self.vectors: dict[str, Any] = {}

    def vector_for(self, text: str, *, count: bool = False) -> Any:
        return self.vectors.get(text)

    def ask(self, chat_id: str, text: str) -> None:
        pass


def test_a_ready_question_vector_brings_the_scene_nearest_by_meaning() -> None:
    """Words rank scene 1 before 2 (the search's answer); by meaning, scene 2 is the one
    asked about: fused, it comes first, and it is the one that fits. Before the vector is
    ready, words alone."""
    search = CountingSearch()
    view = dataclasses.replace(
        scenes_view("They met at the mill"),
        vectors=stacked([1, 2], [unit([1, 0]), unit([0, 1])]),
    )
    messages = [ChatMessage("user", "The mill burned.")]
    questions = Ready()

    def ask() -> str:  # room for one scene
        return relevant_scenes(search, view, "c", messages, [0], SETTINGS, None, 6, questions)

    assert "mill 1" in ask() and "mill 2" not in ask()
    questions.vectors["The mill burned."] = unit([0.1, 1])
    meant = ask()  # not the answer kept for the question before its vector was ready
    assert "mill 2" in meant and "mill 1" not in meant


def test_meaning_counts_as_the_questions_words_before_the_context_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The question's words find nothing; the newest messages' words find scene 1; its
    meaning finds scene 2, which is what is asked about: with room for one, scene 2."""
    monkeypatch.setattr(recall, "ranking", lambda *args: ((), (1,)))
    view = dataclasses.replace(
        scenes_view("They met at the mill"),
        vectors=stacked([1, 2], [unit([1, 0]), unit([0, 1])]),
    )
    messages = [ChatMessage("user", "Where is it now?")]
    questions = Ready()
    search = CountingSearch()

    def ask() -> str:  # room for one scene
        return relevant_scenes(search, view, "c", messages, [0], SETTINGS, None, 6, questions)

    assert "mill 1" in ask()  # the context's, without the vector
    questions.vectors["Where is it now?"] = unit([0, 1])
    assert "mill 2" in ask() and "mill 1" not in ask()
