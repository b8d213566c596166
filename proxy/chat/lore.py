"""Lorebook snapshots for generated messages: which entries each prompt carried.

After a chat request is forwarded, the books that apply to its chat are matched against
the prompt that was sent, on the store's thread, and the snapshot is stored for
the message the reply will be (it binds to that message once ST saves it). Books, cards
and ST's settings are read once and re-read only when the watcher says they changed.
Nothing here can delay or break a request: every failure is logged and dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from proxy.core.fingerprints import normalize
from proxy.core.lore import (
    LoreEntry,
    LoreMatcher,
    StickyTracker,
    WorldEntry,
    prepare,
    snapshot,
    st_sticky_keys,
)
from proxy.core.models import ChatMessage, Identification
from proxy.library.chats import ChatLibrary
from proxy.sillytavern.layout import inside
from proxy.sillytavern.worlds import (
    Card,
    LoreSettings,
    World,
    read_card,
    read_lore_settings,
    read_world,
)
from proxy.store import Database, Store, log_failed
from proxy.store.records import ChatRecord
from proxy.tasks import TaskSet

log = logging.getLogger(__name__)


class LoreService:
    """Owns the lorebook caches and writes snapshots on the store's thread (every cache
    here is that thread's alone)."""

    def __init__(self, store: Store, library: ChatLibrary) -> None:
        self.store = store
        self.library = library
        self._worlds: dict[Path, World | None] = {}
        self._cards: dict[Path, Card | None] = {}
        self._settings: dict[str, LoreSettings] = {}
        # Matchers per (user, books with their {{char}}, persona): entries are prepared once
        # per book version, not per generation.
        self._matchers: dict[tuple[object, ...], LoreMatcher] = {}
        # Changed files reported from the event loop; the worker forgets them before it
        # next reads a cache (every cache here is the worker thread's alone).
        self._changed: deque[Path] = deque()
        self._trackers: dict[str, StickyTracker] = {}
        self._tasks = TaskSet()
        # Chats no book applies to, with what that was worked out from (the files' version
        # and the chat's own book): their requests skip the store thread altogether.
        self._files_version = 0
        self._bookless: dict[str, tuple[int, str | None]] = {}

    # -- called by the server --------------------------------------------------------------

    def record_later(
        self, ident: Identification, messages: Sequence[ChatMessage], swipe: int | None = None
    ) -> None:
        """Snapshot this generation in the background; the request does not wait."""
        if ident.target_message is None:
            return  # quiet generations make no message
        entry = self.library.index.entries.get(ident.chat_id)
        known = self._bookless.get(ident.chat_id)
        if entry is not None and known == (self._files_version, entry.world):
            return
        texts = [m.text for m in messages]
        self._tasks.spawn(self._record(ident, texts, swipe), f"lore-snapshot {ident.chat_id}")

    async def drain(self) -> None:
        await self._tasks.drain()

    def invalidate(self, paths: Iterable[Path]) -> None:
        """Note books, cards and settings that changed on disk (thread-safe)."""
        self._changed.extend(paths)
        self._files_version += 1

    async def _record(self, ident: Identification, texts: list[str], swipe: int | None) -> None:
        try:
            await self.store.call(lambda db: self._record_now(db, ident, texts, swipe))
        except Exception:
            log_failed(log, "lorebook snapshot for %s failed", ident.chat_id)

    async def active_lore(self, chat_id: str, first: int, last: int) -> str:
        """`{{active_lore}}` for a scene: the entries its messages' prompts carried, with
        their current text, one per line (empty when there are none)."""

        def work(db: Database) -> str:
            chat = db.chat(chat_id)
            matcher = self.matcher_for(chat) if chat is not None else None
            if matcher is None:
                return ""
            current = {e.key: e for e in matcher.entries}
            lines = []
            for item in db.lore.active_lore(chat_id, first, last):
                found = current.get((item["world"], str(item["uid"])))
                if found is not None:
                    title = found.entry.comment or ", ".join(found.entry.key) or "entry"
                    lines.append(f"- {title}: {found.text}")
            return "\n".join(lines)

        return await self.store.call(work)

    # -- worker-thread side ---------------------------------------------------------------

    def _record_now(
        self, db: Database, ident: Identification, texts: list[str], swipe: int | None
    ) -> None:
        chat = db.chat(ident.chat_id)
        if chat is None or ident.target_message is None:
            return
        version = self._files_version  # before the caches are read: a change after it counts
        matcher = self.matcher_for(chat)
        if matcher is None:
            self._bookless[chat.id] = (version, chat.own_world)
            return
        self._bookless.pop(chat.id, None)
        active = matcher.active(normalize("\n".join(texts)))
        tracker = self._trackers.setdefault(chat.id, StickyTracker())
        tracker.advance(ident.target_message)
        st_sticky = st_sticky_keys(chat.chat_metadata, db.visible_count(chat.id))
        result = snapshot(matcher.entries, active, tracker, st_sticky)
        which = self._swipe(db, chat, ident, swipe)
        db.lore.add_snapshot(
            chat.id, ident.target_message, which, ident.generation, result, db.clock()
        )

    def _swipe(
        self, db: Database, chat: ChatRecord, ident: Identification, swipe: int | None
    ) -> int:
        if swipe is not None:
            return swipe
        target = db.message_at(chat.id, ident.target_message or 0)
        if ident.generation == "swipe" and target is not None:
            return target.message.swipe_count  # the swipe about to be added
        if ident.generation == "continue" and target is not None:
            return target.message.swipe_id or 0
        return 0

    def matcher_for(self, chat: ChatRecord) -> LoreMatcher | None:
        """The matcher over every enabled entry of every book that applies to the chat,
        or None when none does. Store thread."""
        data_dir = self.library.data_dir
        if data_dir is None:
            return None
        self._forget_changed()
        user_dir = data_dir / chat.user
        settings = self._settings.get(chat.user)
        if settings is None:
            settings = self._settings[chat.user] = read_lore_settings(user_dir)
        avatars = self._avatars(chat)
        cards = [card for card in (self._card(user_dir, a) for a in avatars) if card]
        own = chat.chat_metadata.get("world_info")
        # ST's order of sources: the chat's book, the persona's, the characters', global.
        candidates = [
            own if isinstance(own, str) else None,
            settings.persona_book,
            *(card.world for card in cards),
            *(book for a in avatars for book in settings.character_extras.get(a, ())),
            *settings.global_books,
        ]
        books = list(dict.fromkeys(name for name in candidates if name))
        default_char = cards[0].name if cards else chat.display_name
        # A book's {{char}} is the character whose card brought it in.
        chars = {card.world: card.name for card in reversed(cards) if card.world}
        persona = self.library.persona(chat.user)
        key = (chat.user, tuple((b, chars.get(b, default_char)) for b in books), persona)
        matcher = self._matchers.get(key)
        if matcher is None:
            entries: list[LoreEntry] = []
            for name in books:
                world = self._world(user_dir / "worlds" / f"{name}.json")
                if world is not None:
                    macros = {"char": chars.get(name, default_char), "user": persona}
                    entries += prepare(world.name, world.entries, macros)
            matcher = self._matchers[key] = LoreMatcher(entries)
        return matcher if matcher.entries else None

    def own_entries(self, chat: ChatRecord) -> Sequence[WorldEntry]:
        """The entries of the chat's own book (`chat_metadata.world_info`), as cached: the
        same tuple until the file changes. Store thread."""
        data_dir = self.library.data_dir
        name = chat.own_world
        if data_dir is None or not name:
            return ()
        self._forget_changed()
        world = self._world(data_dir / chat.user / "worlds" / f"{name}.json")
        return world.entries if world is not None else ()

    def _forget_changed(self) -> None:
        changed = False
        while self._changed:
            path = self._changed.popleft()
            changed = True
            self._worlds.pop(path, None)
            self._cards.pop(path, None)
            if path.name == "settings.json":
                self._settings.pop(path.parent.name, None)
        if changed:
            self._matchers.clear()

    def _avatars(self, chat: ChatRecord) -> list[str]:
        if chat.kind == "character" and chat.character:
            return [chat.character]
        group = self.library.group(chat.user, chat.name)
        return [m.removesuffix(".png") for m in group.members] if group else []

    def _card(self, user_dir: Path, avatar: str) -> Card | None:
        for path in (
            user_dir / "characters" / f"{avatar}.png",
            user_dir / "characters" / f"{avatar}.json",
        ):
            if path not in self._cards:
                readable = path.exists() and inside(user_dir, path)
                self._cards[path] = read_card(path) if readable else None
            if self._cards[path] is not None:
                return self._cards[path]
        return None

    def _world(self, path: Path) -> World | None:
        if path not in self._worlds:
            readable = inside(path.parent.parent, path)  # <user>/worlds/<book>.json
            self._worlds[path] = read_world(path) if readable else None
        return self._worlds[path]
