"""The embedder: the one owner of the embedding work, on the event loop.

Two kinds of texts are embedded, neither on a request's way:
- a chat's scene recaps, when planning finds some without a vector (`MemoryView.
  unembedded`): batched, stored by their text's hash (`proxy.store.vectors`), counted in
  the chat's usage as `embed`; the chat is planned again so that its view holds them;
- the user's question, when ST saves the chat (ST writes the user's message 30-150 ms
  before it sends the request): kept in memory by its text, so that the request usually
  finds its vector ready (`vector_for`), and ranks by words alone when it does not.

A failing API is said once per outage in the log and in `/health` (`state`), and asked
again after a pause that doubles up to five minutes; recall goes on by words meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from proxy.core.fingerprints import normalize
from proxy.core.models import ChatMessage
from proxy.core.vectors import Vector
from proxy.errors import EmbeddingFailure
from proxy.memory.calls.embeddings import OPERATION, EmbeddingClient
from proxy.observe.events import EventBus
from proxy.settings.embeddings import EmbeddingSettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database, Store
from proxy.tasks import TaskSet
from proxy.waits import SERVING

log = logging.getLogger(__name__)

QUESTIONS_KEPT = 256  # question vectors (a swipe or regenerate asks the same again)
QUESTION_CHARS = 1200  # of the user's message: its end is what is asked now
PAUSE_FIRST, PAUSE_MOST = 10.0, 300.0  # seconds before asking a failing API again


def question_text(text: str) -> str:
    """What is embedded of the user's message, the same from the chat file's copy and the
    request's (whitespace folded)."""
    return normalize(text)[-QUESTION_CHARS:]


class Embedder:
    def __init__(
        self,
        settings: EmbeddingSettings,
        client: EmbeddingClient,
        store: Store,
        *,
        planned: Callable[[str], Awaitable[object]],
        clock: Callable[[], float],
        events: EventBus | None = None,
        gather: float = SERVING.embed_gather,
    ) -> None:
        """`planned(chat)`: plans a chat again once vectors of its scenes are stored;
        `gather`: seconds texts to embed gather before a call (`Waits.embed_gather`)."""
        self.settings = settings
        self.client = client
        self.store = store
        self.model = settings.identity()
        self.planned = planned
        self.clock = clock
        self.gather = gather
        self.events = events
        self.state = "ok"  # or "failing: <why>"
        self._pause = 0.0
        self._retry_at = 0.0
        self._wanted: dict[str, dict[str, str]] = {}  # chat -> hash -> text
        self._worker: asyncio.Task[None] | None = None
        self._questions: OrderedDict[str, Vector] = OrderedDict()
        self._asking: dict[str, asyncio.Future[Vector | None]] = {}
        self._tasks = TaskSet()
        self.calls = 0
        # Requests whose question's vector was ready (True) or not (False) when recall
        # asked: how often ST's save comes early enough.
        self.ready_counts = {True: 0, False: 0}

    @property
    def waiting(self) -> int:
        """Scene texts and entity cards wanted and not embedded yet."""
        return sum(map(len, self._wanted.values()))

    # -- scenes -----------------------------------------------------------------------------

    def want(self, chat_id: str, texts: Sequence[tuple[str, str]]) -> None:
        """Scene texts (hash, text) of a chat with no vector yet: embed them soon."""
        if not texts:
            return
        self._wanted.setdefault(chat_id, {}).update(texts)
        if self._worker is None or self._worker.done():
            self._worker = self._tasks.spawn(self._work(), "embed scenes")

    async def _work(self) -> None:
        if sum(map(len, self._wanted.values())) < self.settings.batch_size:
            await asyncio.sleep(self.gather)  # more may come: one call for many
        while self._wanted:
            wait = self._retry_at - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            chat_id = next(iter(self._wanted))
            wanted = self._wanted[chat_id]
            batch = list(wanted.items())[: self.settings.batch_size]
            try:
                vectors, tokens = await self._embed([text for _, text in batch], chat_id)
            except EmbeddingFailure:
                continue  # paused (`_failed`); the texts stay wanted
            pairs = [(h, v) for (h, _), v in zip(batch, vectors, strict=True)]
            now = self.clock()
            keep = partial(self._keep, chat_id=chat_id, pairs=pairs, tokens=tokens, now=now)
            await self.store.call(keep)
            for h, _ in batch:
                wanted.pop(h, None)
            if not wanted:
                del self._wanted[chat_id]
                await self.planned(chat_id)  # its view takes the vectors in

    def _keep(
        self,
        db: Database,
        chat_id: str,
        pairs: list[tuple[str, Vector]],
        tokens: int | None,
        now: float,
    ) -> None:
        db.vectors.put(self.model, pairs, now)
        db.usage.add(chat_id, OPERATION, now, tokens or 0, 0)

    # -- questions --------------------------------------------------------------------------

    def ask(self, chat_id: str, text: str) -> None:
        """ST saved the user's message: embed it before the request asks (`vector_for`)."""
        asked = question_text(text)
        key = text_hash(asked)
        if not asked or key in self._questions or key in self._asking:
            return
        if self._retry_at > self.clock():
            return  # failing: the request ranks by words
        future: asyncio.Future[Vector | None] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        self._tasks.spawn(self._ask(chat_id, key, asked, future), "embed a question")

    async def _ask(
        self, chat_id: str, key: str, text: str, future: asyncio.Future[Vector | None]
    ) -> None:
        found: Vector | None = None
        try:
            [found], tokens = await self._embed([text], chat_id)
            self._questions[key] = found
            while len(self._questions) > QUESTIONS_KEPT:
                self._questions.popitem(last=False)
            now = self.clock()
            await self.store.call(lambda db: db.usage.add(chat_id, OPERATION, now, tokens or 0, 0))
        except EmbeddingFailure:
            pass
        finally:
            self._asking.pop(key, None)
            if not future.done():
                future.set_result(found)

    def vector_for(self, text: str, *, count: bool = False) -> Vector | None:
        """The question's vector when it is ready (the chat path: no waiting). `count`:
        a request's recall asks; whether it was ready is counted (`/health`)."""
        found = self._questions.get(text_hash(question_text(text)))
        if count:
            self.ready_counts[found is not None] += 1
        return found

    async def ready(self, messages: Sequence[ChatMessage], wait_ms: int) -> None:
        """Wait up to `wait_ms` (`recall_wait_ms`) for the vector of the request's question
        (its user's last message) while it is being made."""
        users = [m for m in messages if m.role == "user"]
        if not users or wait_ms <= 0:
            return
        future = self._asking.get(text_hash(question_text(users[-1].text)))
        if future is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(future), wait_ms / 1000)

    # -- the API ------------------------------------------------------------------------------

    async def _embed(self, texts: list[str], chat_id: str) -> tuple[list[Vector], int | None]:
        self.calls += 1
        try:
            found = await self.client.embed(texts)
        except EmbeddingFailure as exc:
            self._failed(exc)
            raise
        if self.state != "ok":
            log.info("the embeddings API answers again: recall by meaning is back")
            self.state = "ok"
            self._pause = 0.0
            self._publish()
        return found

    def _failed(self, exc: EmbeddingFailure) -> None:
        first = self.state == "ok"
        self.state = f"failing: {exc}"
        self._pause = min(PAUSE_MOST, max(PAUSE_FIRST, self._pause * 2))
        self._retry_at = self.clock() + self._pause
        if first:
            log.warning(
                "the embeddings API failed (%s): older scenes are recalled by their words "
                "alone until it answers; asked again in %.0f s",
                exc,
                self._pause,
            )
            self._publish()

    def _publish(self) -> None:
        if self.events is not None:
            self.events.publish("health", embeddings=self.state)

    async def close(self) -> None:
        await self._tasks.cancel()
