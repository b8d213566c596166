"""The proxy's knowledge of ST's chats: the mirror in the store and the in-memory index.

Every file read and store write runs on the store's one thread (`Store.call`, in
`proxy.library.mirror`); the identification index lives on the event loop and is only changed
there, from entries the worker computed. A chat file is re-read only when its size or
mtime changed, and parsed only where its lines changed (see `proxy.sillytavern.chatfile`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from proxy.core.models import ChatMessage, HistorySpan, Identification
from proxy.core.placement import find_history
from proxy.core.regex_scripts import PromptScripts
from proxy.core.st_metadata import find_st_metadata
from proxy.identify.chat_index import ChatIndex
from proxy.identify.match import Prints, identify, likely_chats, prints, unidentified_reason
from proxy.library.mirror import Mirror, Refreshed, Stat
from proxy.sillytavern.changes import EarlyReads, Freshness
from proxy.sillytavern.layout import (
    SUFFIX,
    GroupInfo,
    locate,
    newest_first,
    same_folder,
    scan,
)
from proxy.store import Database, Store, file_error, log_failed
from proxy.waits import SERVING

__all__ = ["ChatLibrary", "Refreshed", "RequestIdentity"]

log = logging.getLogger(__name__)


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class RequestIdentity:
    identification: Identification | None
    replacements: dict[int, str]
    span: HistorySpan  # the request's history as found from the request alone

    @property
    def history(self) -> tuple[int, ...]:
        """Every chat-history index of the request (not only the matched ones)."""
        return self.span.indices


class ChatLibrary:
    """Owns the mirror of ST's chats: indexing, refreshing, and the identification index."""

    def __init__(
        self, data_dir: Path | None, store: Store, *, freshness: float = SERVING.freshness
    ) -> None:
        """`freshness`: seconds a request may wait for its chat file to be re-read."""
        self.data_dir = data_dir
        self.freshness_wait = freshness
        self.store = store
        self.index = ChatIndex()
        self.mirror = Mirror(data_dir)  # the worker thread's: reads files into the store
        self.listeners: list[Callable[[Refreshed], None]] = []
        # Set once the first full indexing has ended (however it ended): tests and tools
        # await it instead of polling the index.
        self.indexed = asyncio.Event()
        # (size, mtime_ns) of each chat file as the index knows it: the per-request freshness
        # check. Only the event loop writes it, right after installing what the read found,
        # so a request can never be told a file is fresh while its entry is not installed.
        self._stats: dict[str, Stat] = {}
        self._files: dict[str, str] = {}  # chat id -> its file (the freshness stat's)
        # Which chats' files may have changed since a stat found them as indexed (the OS's
        # notifications, once `follow_changes` turned them on).
        self.freshness = Freshness(os.fspath(data_dir)) if data_dir is not None else None
        # A chat ST saved is re-read at once, not when its request comes (with the OS's
        # notifications only: they say when).
        self._early = EarlyReads(self._read_saved)
        if self.freshness is not None:
            self.freshness.on_write = self._written
        # What the store failed to take (a full disk): the chat files, or all of them, to
        # read again once it can (`catch_up`); `fell_behind` says there is some.
        self._behind: set[Path] = set()
        self._behind_all = False
        self.fell_behind = asyncio.Event()

    # -- indexing ------------------------------------------------------------------------

    async def index_all(self) -> int:
        """Index every chat under the data folder; unchanged files are not read again.

        One chat per worker job, so that a request's freshness check can slip in between
        and identification improves as indexing goes.
        """
        try:
            return await self._index_all()
        finally:
            self.indexed.set()

    async def _index_all(self) -> int:
        if self.data_dir is None:
            return 0
        data_dir = self.data_dir
        before = await self.store.call(lambda db: db.mirrored_folder())
        if before is not None and not same_folder(before, data_dir):
            # Chat ids are paths under the folder: those not found under this one are
            # marked deleted, and come back with their memory if their file does (within
            # the week a deleted chat is kept). `chats` and `identify` refuse this instead.
            log.warning(
                "this store mirrored SillyTavern's data folder %s; it mirrors %s from now on. "
                "Chats not in it are marked deleted (kept a week: serving %s again brings "
                "them back)",
                before,
                data_dir,
                before,
            )
        try:
            locations = await self.store.call(
                lambda db: newest_first(data_dir, scan(data_dir, strict=True))
            )
        except OSError as exc:
            # Not a folder without chats: its chats are not marked deleted, they keep
            # their memory until it can be read (the watcher reads it again once back).
            log.error(
                "cannot read SillyTavern's data folder %s (%s); its chats are left as they were",
                data_dir,
                exc.strerror or exc,
            )
            return 0
        await self.store.call(lambda db: self.mirror.reset_caches())
        count = 0
        for location in locations:
            read: dict[str, Stat] = {}
            watched = self._watching()
            refresh = partial(
                self.mirror.refresh_location, location=location, startup=True, read=read
            )
            try:
                result = await self.store.call(refresh)
            except Exception as exc:
                if file_error(exc):  # every chat would fail alike
                    self._behind_all = True
                    self.fell_behind.set()
                    raise
                # One chat that cannot be read (a bug it meets) does not stop the others.
                log.exception("reading the chat %s failed", location.chat_id)
                continue
            if result is not None:
                self._install(result)
                count += 1
            self._took(read, watched)
        seen = {location.chat_id for location in locations}
        for result in await self.store.call(lambda db: self.mirror.forget_missing(db, seen)):
            self._install(result)
        folder = str(data_dir.expanduser().resolve())
        await self.store.call(lambda db: db.set_mirrored_folder(folder))
        return count

    async def refresh(self, paths: Iterable[Path]) -> list[Refreshed]:
        """Re-read changed chat files, or the chat files inside changed folders (the
        watcher's entry point)."""
        paths = list(paths)

        read: dict[str, Stat] = {}

        def work(db: Database) -> list[Refreshed]:
            files: list[Path] = []
            for path in paths:
                if path.is_dir():
                    files.extend(sorted(path.rglob(f"*{SUFFIX}")))
                else:
                    files.append(path)
            return self.mirror.refresh_many(db, [r for r in map(self._rel, files) if r], read)

        watched = self._watching()
        try:
            results = await self.store.call(work)
        except Exception as exc:
            if file_error(exc):
                self._behind.update(paths)
                self.fell_behind.set()
            raise
        for result in results:
            self._install(result)
        self._took(read, watched)
        return results

    async def catch_up(self) -> int:
        """Read again what the store failed to take (`fell_behind`): the whole folder if
        indexing it failed, else the chat files whose re-read failed; how many chats."""
        self.fell_behind.clear()
        everything, paths = self._behind_all, sorted(self._behind)
        self._behind_all = False
        self._behind.clear()
        if everything:
            return await self.index_all()
        return len(await self.refresh(paths)) if paths else 0

    async def refresh_watched(self, paths: Iterable[Path]) -> list[Refreshed]:
        """The watcher's batch: `refresh`, less the chat files that the OS's notifications
        say are as indexed (a save read the moment it landed, `EarlyReads`, is not read a
        second time when the watcher's debounced batch names it)."""
        paths = list(paths)
        fresh = self.freshness
        if fresh is not None and fresh.feed is not None:
            paths = [path for path in paths if not self._as_indexed(fresh, path)]
        return await self.refresh(paths) if paths else []

    def _as_indexed(self, fresh: Freshness, path: Path) -> bool:
        rel = self._rel(path)
        location = locate(rel) if rel is not None else None
        return location is not None and fresh.unchanged(location.chat_id)

    def _watching(self) -> frozenset[str]:
        return self.freshness.watching() if self.freshness is not None else frozenset()

    def _took(self, read: dict[str, Stat], watched: frozenset[str]) -> None:
        # After the entries are in: from now on a request may take these files as read.
        self._stats.update(read)
        self.index.reasoning = self.mirror.reasoning  # and the settings read with them
        if self.freshness is not None and read:
            self.freshness.read([(c, self._file(c)) for c in read], watched)

    async def ensure_fresh(self, chat_id: str) -> bool:
        """Re-read one chat if ST saved it since it was indexed; True if it was re-read."""
        name = self._saved_since(chat_id)
        return name is not None and await self._reread(name)

    def _saved_since(self, chat_id: str) -> str | None:
        """The chat's file if ST saved it since it was indexed (one stat, unless the OS
        says nothing was written to it since the last), else None. Not a coroutine: this
        is on every chat request, and a re-read on few."""
        fresh = self.freshness
        if fresh is None or chat_id not in self.index.entries or fresh.unchanged(chat_id):
            return None
        name = self._file(chat_id)
        try:
            stat = os.stat(name)
        except OSError:
            return None
        same = self._stats.get(chat_id) == (stat.st_size, stat.st_mtime_ns)
        fresh.checked(chat_id, name, same)
        return None if same else name

    def _file(self, chat_id: str) -> str:
        name = self._files.get(chat_id)
        if name is None:
            # A string, not a Path: it is stat'ed on chat requests.
            assert self.data_dir is not None  # a chat is only indexed from a data folder
            name = self._files[chat_id] = os.fspath(self.data_dir / f"{chat_id}.jsonl")
        return name

    def follow_changes(self) -> bool:
        """Take the OS's notifications of writes to the chat folders (on the running loop),
        so that a request skips the stat of a chat nothing was written to; True when they
        are on (Linux). `stop_following` ends them."""
        fresh = self.freshness
        if fresh is None or not fresh.start():
            return False
        for chat_id in list(self.index.entries):
            fresh.follow(self._file(chat_id))
        return True

    def stop_following(self) -> None:
        if self.freshness is not None:
            self.freshness.stop()
        self._early.stop()

    def _written(self, chat_id: str) -> None:
        # A new chat too (a branch, a chat started or imported in a folder that holds
        # indexed ones): read now, not when the watcher's debounced batch names it, so
        # that the request ST sends right after saving it waits for it (`_to_check`).
        self._early.written(chat_id)

    async def _read_saved(self, chat_id: str) -> None:
        if self.freshness is not None:
            self.freshness.reading(chat_id)  # so its request skips the stat
        try:
            await self.refresh([Path(self._file(chat_id))])
        except Exception:  # said here: one line when the store is failing
            log_failed(log, "re-reading %s after ST saved it failed", chat_id)

    async def _reread(self, name: str) -> bool:
        """Re-read the chat file `name`, waiting for it at most `freshness` seconds; True if
        it was re-read in that time."""
        path = Path(name)
        try:
            # Bounded: a request never waits long for the mirror; past this it is
            # identified against what is indexed, and the re-read finishes anyway.
            await asyncio.wait_for(asyncio.shield(self.refresh([path])), self.freshness_wait)
        except TimeoutError:
            log.warning(
                "re-reading %s took over %.1f s; identifying without it", path, self.freshness_wait
            )
            return False
        return True

    async def set_enabled(self, chat_id: str, enabled: bool | None) -> None:
        """A chat's own memory on/off (None: the default), in the store and the index that
        the chat path reads."""
        await self.store.call(lambda db: db.set_enabled(chat_id, enabled))
        entry = self.index.entries.get(chat_id)
        if entry is not None:
            entry.enabled = enabled

    def _install(self, result: Refreshed) -> None:
        if result.renamed_from:
            self.index.remove(result.renamed_from)
            self._stats.pop(result.renamed_from, None)
            self._files.pop(result.renamed_from, None)
        if result.entry is None:
            self.index.remove(result.chat_id)
            self._stats.pop(result.chat_id, None)
            self._files.pop(result.chat_id, None)
        else:
            self.index.put(result.entry)
            if self.freshness is not None and self.freshness.feed is not None:
                self.freshness.follow(self._file(result.chat_id))
        for listener in self.listeners:
            try:
                listener(result)
            except Exception:
                log.exception("chat change listener failed for %s", result.chat_id)

    def _rel(self, path: Path) -> str | None:
        if self.data_dir is None:
            return None
        try:
            return path.resolve().relative_to(self.data_dir.resolve()).as_posix()
        except ValueError:
            return None

    # -- identification (event loop) ----------------------------------------------------

    async def identify_request(
        self,
        messages: Sequence[ChatMessage],
        markers: Sequence[str],
        chat_header: str | None = None,
    ) -> RequestIdentity:
        """Which chat a request is for: header, then `<ST_METADATA>`, then matching.

        The chosen chat's file is checked by a stat first and re-read if ST saved it since
        it was indexed (ST saves the user's message just before it sends the request).
        """
        span = find_history(messages, markers)
        replacements: dict[int, str] = {}
        named: str | None = None
        if chat_header:
            named = self.index.resolve(unquote(chat_header))
        metadata = find_st_metadata(messages)
        if metadata is not None:
            replacements[metadata.index] = metadata.stripped
            if named is None and metadata.chat:
                named = self.index.resolve(metadata.chat)
        newest: Prints | None = None
        if named is None:
            newest = prints(messages, span, self.index)
            chats = await self._to_check(newest)
        else:
            chats = [named]
        for chat_id in chats:
            reading = self._early.under_way(chat_id)
            if reading is not None:
                await asyncio.wait({reading}, timeout=self.freshness_wait)
            saved = self._saved_since(chat_id)
            if saved is not None:
                await self._reread(saved)
        found = identify(messages, span, self.index, only=named, printed=newest)
        if found is None and log.isEnabledFor(logging.DEBUG):
            why = unidentified_reason(messages, span, self.index, only=named)
            log.debug("request not identified as any chat: %s", why)
        return RequestIdentity(found, replacements, span)

    async def _to_check(self, newest: Prints) -> list[str]:
        """The chats a request with these newest messages checks for a save since read."""
        # A chat ST just saved is being read: it is the likeliest, whether or not the index
        # holds these messages yet (a branch whose hidden messages were shown again and the
        # user's new one added: only its parent held any of them, and was all that was
        # checked). After a save that read is this request's own, waited for anyway.
        running = self._early.all_under_way()
        if running:
            await asyncio.wait(running, timeout=self.freshness_wait)
        chats = likely_chats(newest, self.index)
        # A chat just saved is the likeliest, though others sharing these messages were
        # saved after it before (a checkpoint opened again); unnotified, each is checked.
        unnotified = self.freshness is not None and self.freshness.feed is None
        others = [c for c in newest.candidates(self.index) if c not in chats]
        return chats + [c for c in others if unnotified or self._early.under_way(c)]

    # -- what the mirror read beside the chats -------------------------------------------

    # The adapters, the lore recorder and the memory engine ask the library; the mirror
    # keeps these (`Mirror.prompt_formats`, `.group`, `.persona`; the last two on the
    # worker thread).

    def prompt_formats(self) -> list[dict[str, Any]]:
        return self.mirror.prompt_formats()

    def group(self, user: str, chat_name: str) -> GroupInfo | None:
        return self.mirror.group(user, chat_name)

    def persona(self, user: str) -> str:
        return self.mirror.persona(user)

    def prompt_scripts(self, user: str) -> PromptScripts:
        """The regex scripts the user's ST runs on a prompt (store's thread)."""
        return self.mirror.scripts(user)
