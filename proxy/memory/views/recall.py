"""Recalling older scenes on the chat path: what a request asks the scene search
(`proxy.store.search`), memoised, and the `{{relevant_scenes}}` text it makes of the answer
(`proxy.core.recall` decides the terms and the choice). With embeddings, the scenes
nearest the user's question by meaning are fused with that ranking (`proxy.core.vectors`),
when the question's vector is ready; the request never waits for one here."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

from proxy.core.fingerprints import IndexedMessage, message_fingerprint, normalize
from proxy.core.models import ChatMessage
from proxy.core.recall import (
    SceneCard,
    Vocabulary,
    match_query,
    pick_scenes,
    render_scenes,
    search_terms,
)
from proxy.core.vectors import Vector, VectorSet, fuse
from proxy.settings.memory import MemorySettings


class SceneRanker(Hashable, Protocol):
    """The scene search, as a request uses it."""

    def ranked(self, chat_id: str, query: str, limit: int, min_score: float) -> list[int]: ...


class ChatScenes(Protocol):
    """What recall reads of a chat's memory view (`proxy.memory.views.view.MemoryView`)."""

    @property
    def scenes(self) -> Mapping[int, SceneCard]: ...  # break uid -> scene

    @property
    def vocabulary(self) -> Vocabulary: ...  # replaced whenever a scene changes

    @property
    def names(self) -> tuple[str, ...]: ...  # the chat's character and user names

    @property
    def vectors(self) -> VectorSet | None: ...  # its scenes by meaning, when embedded


class Questions(Protocol):
    """The embedder, as a request asks it for its question's vector."""

    def vector_for(self, text: str, *, count: bool = False) -> Vector | None: ...

    def ask(self, chat_id: str, text: str) -> None: ...


# Scenes asked of the search per request, and the least bm25 score that counts as a match
# (about one term that a tenth of the scenes share: see `proxy.core.recall`).
SEARCH_LIMIT = 24
CONTEXT_CHARS = 1200
MIN_SCORE = 1.0

# `relevant_scenes` answers by what it was asked: the chat's scenes (their vocabulary, which
# is replaced whenever one changes, stands for them in the key: the scenes themselves are
# a dict, so no lru_cache), the recent messages, the room. Swipes and regenerations, which
# a role-play has many of, ask the same again.
_RELEVANT: dict[Hashable, str] = {}
RELEVANT_KEPT = 256
# `ranking`'s answers, by the recent messages' fingerprints (see there).
Ranked = tuple[tuple[int, ...], tuple[int, ...]]  # by the question's words; then the rest's
_RANKS: dict[Hashable, Ranked] = {}


def relevant_scenes(
    search: SceneRanker,
    view: ChatScenes,
    chat_id: str,
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    settings: MemorySettings,
    before: int | None,
    room: int,
    questions: Questions | None = None,
) -> str:
    """`{{relevant_scenes}}`: the older scenes that bear on the recent messages, ending
    before chat position `before`, within `room` tokens."""
    recent = tuple([messages[i] for i in history[-settings.relevant_scenes_context :]])
    near = nearest(view, recent, questions, settings.embeddings.min_similarity)
    key = (search, view.vocabulary, chat_id, view.names, recent, before, room, near)
    found = _RELEVANT.get(key)
    if found is None:
        asked, context = ranking(search, view, chat_id, recent)
        # The question's own words and its meaning are one kind of evidence, fused; the
        # newest messages' words (what is happening around it) come after both.
        ranked = fuse([asked, near]) if near else list(asked)
        ranked += [uid for uid in context if uid not in ranked]
        found = render_scenes(pick_scenes(ranked, view.scenes, before, room))
        _keep(_RELEVANT, key, found)
    return found


def nearest(
    view: ChatScenes, recent: Sequence[ChatMessage], questions: Questions | None, floor: float
) -> tuple[int, ...]:
    """The scenes nearest the user's last message by meaning, best first; none when its
    vector is not ready (or the chat's scenes are not embedded)."""
    if questions is None or view.vectors is None:
        return ()
    users = [m for m in recent if m.role == "user"]
    question = questions.vector_for(users[-1].text, count=True) if users else None
    if question is None:
        return ()
    return tuple(view.vectors.nearest(question, SEARCH_LIMIT, floor))


def ranking(
    search: SceneRanker, view: ChatScenes, chat_id: str, recent: Sequence[ChatMessage]
) -> Ranked:
    """`rank_scenes`, memoised by the roles and fingerprints of `recent` (their text with
    the whitespace folded, all that the ranking reads), not by their text as written: the
    ranking `rank_ahead` makes from the chat file's copy when ST saves is then
    the one the request that follows finds, with no search terms worked out on its way.
    The request's fingerprints were worked out to identify it: looking them up is cheap."""
    prints = tuple([(m.role, message_fingerprint(m.text)) for m in recent])
    key = (search, view.vocabulary, chat_id, view.names, prints)
    found = _RANKS.get(key)
    if found is None:
        found = rank_scenes(search, view, chat_id, recent)
        _keep(_RANKS, key, found)
    return found


def rank_ahead(
    search: SceneRanker,
    view: ChatScenes | None,
    chat_id: str,
    tail: Sequence[IndexedMessage],
    settings: MemorySettings,
    questions: Questions | None = None,
) -> None:
    """ST saved new messages of the chat, and the request that carries them follows (once
    ST has built its prompt): rank the older scenes against its newest messages (`tail`,
    the chat index's) now. `ranking` keeps it by their fingerprints, so that request finds
    it instead of working out search terms and asking the store's full-text index on its
    way (two queries, most of what its memory step cost). With embeddings, the user's
    message is embedded now too (`questions`), for the request to find its vector ready."""
    if view is None or not view.scenes or not settings.relevant_scenes_max_tokens:
        return
    asked = [m for m in tail if m.is_user]
    if questions is not None and view.vectors is not None and asked:
        questions.ask(chat_id, asked[-1].text)
    newest = tail[-settings.relevant_scenes_context :]
    ranking(search, view, chat_id, [ChatMessage("user" if m.is_user else "assistant", m.text)
                                     for m in newest])  # fmt: skip


def _keep(memo: dict[Hashable, Any], key: Hashable, value: object) -> None:
    if len(memo) >= RELEVANT_KEPT:
        del memo[next(iter(memo))]  # the oldest
    memo[key] = value


def rank_scenes(
    search: SceneRanker, view: ChatScenes, chat_id: str, recent: Sequence[ChatMessage]
) -> Ranked:
    """The scenes that match the user's last message of `recent` (the newest chat
    messages), best first; and then those only the words of all of them match."""
    users = [m for m in recent if m.role == "user"]
    words = view.vocabulary
    asked = search_terms([users[-1].text], words, view.names) if users else []
    # The end of each message is what is happening now (and bounds the work per request);
    # cut from its text with the whitespace folded, so that the chat file's copy of it
    # (which the index keeps folded) asks the same question (`rank_ahead`).
    tails = [normalize(m.text)[-CONTEXT_CHARS:] for m in recent]
    context = [
        term
        for term in search_terms(tails, words, view.names, rarest=True, limit=6 + len(asked))
        if term not in asked
    ][:6]
    found = [
        _ranked(search, words, chat_id, match_query(terms)) if terms else ()
        for terms in (asked, context)
    ]
    return found[0], tuple(uid for uid in found[1] if uid not in found[0])


@lru_cache(maxsize=256)
def _ranked(search: SceneRanker, words: Vocabulary, chat_id: str, query: str) -> tuple[int, ...]:
    """The search's answer, memoised for as long as the chat's scenes stay the same (its
    vocabulary is replaced whenever one changes): a regenerated reply, a swipe or a
    continue asks the same question again."""
    return tuple(search.ranked(chat_id, query, SEARCH_LIMIT, MIN_SCORE))
