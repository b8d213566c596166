"""The proxy's knowledge of ST's chats: the mirror in the store and the in-memory index.

Every file read and store write runs on the store's one thread (`Store.call`); the
identification index lives on the event loop and is only changed there, from entries the
worker computed. A chat file is re-read only when its size or mtime changed, and parsed
only where its lines changed (see `proxy.sillytavern.chatfile`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote

import orjson

from proxy.core.identify import (
    TAIL,
    ChatEntry,
    ChatIndex,
    Prints,
    find_st_metadata,
    identify,
    indexed_message,
    likely_chats,
    message_fingerprint,
    prints,
    unidentified_reason,
)
from proxy.core.models import ChatMessage, HistorySpan, Identification
from proxy.core.placement import find_history
from proxy.sillytavern.changes import EarlyReads, Freshness
from proxy.sillytavern.chatfile import ChatFile, RecentSplits, file_digest, parse_chat
from proxy.sillytavern.layout import (
    SUFFIX,
    ChatLocation,
    GroupInfo,
    inside,
    locate,
    read_groups,
    read_persona_name,
    read_prompt_format,
    same_folder,
    scan,
)
from proxy.sillytavern.reconcile import Event, reconcile
from proxy.store import ChatRecord, Database, Store

log = logging.getLogger(__name__)
Stat = tuple[int, int]  # a chat file's (size, mtime_ns)
FRESHNESS_WAIT = 1.0  # seconds a request may wait for its chat file to be re-read
# A chat's newest messages whose fingerprints are worked out when it is indexed: those a
# save added (a reply and the user's next message, or a few more), which the request that
# follows carries for the first time.
FORESEEN = 4


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


@dataclass(frozen=True, slots=True)
class Refreshed:
    """What one refresh did: the chat, its events, and the index entry to install."""

    chat_id: str
    events: tuple[Event, ...]
    entry: ChatEntry | None  # None: the chat is gone
    renamed_from: str | None = None
    saved: bool = False  # the file was written anew (its metadata may have changed)


class ChatLibrary:
    """Owns the mirror of ST's chats: indexing, refreshing, and the identification index."""

    def __init__(self, data_dir: Path | None, store: Store) -> None:
        self.data_dir = data_dir
        self.store = store
        self.index = ChatIndex()
        self._groups: dict[str, dict[str, GroupInfo]] = {}
        self._personas: dict[str, str | None] = {}
        # user -> its ST's instruct and context templates (`read_prompt_format`)
        self._formats: dict[str, dict[str, Any]] = {}
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
        # The last split of each chat file re-read after start-up (the chats being saved):
        # its next save is split without hashing the lines it kept. Worker thread only.
        self._splits = RecentSplits()

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
        locations = await self.store.call(lambda db: list(scan(data_dir)))
        await self.store.call(lambda db: self._reset_caches())
        count = 0
        for location in locations:
            read: dict[str, Stat] = {}
            watched = self._watching()
            result = await self.store.call(
                partial(self._refresh_location, location=location, startup=True, read=read)
            )
            if result is not None:
                self._install(result)
                count += 1
            self._took(read, watched)
        seen = {location.chat_id for location in locations}
        for result in await self.store.call(lambda db: self._forget_missing(db, seen)):
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
            return self._refresh_many(db, [r for r in map(self._rel, files) if r], read)

        watched = self._watching()
        results = await self.store.call(work)
        for result in results:
            self._install(result)
        self._took(read, watched)
        return results

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
        if self.freshness is not None and read:
            self.freshness.read([(c, self._file(c)) for c in read], watched)

    async def ensure_fresh(self, chat_id: str) -> bool:
        """Re-read one chat if ST saved it since it was indexed; True if it was re-read."""
        name = self._saved_since(chat_id)
        return name is not None and await self._reread(name)

    def settled(self, chat_id: str) -> bool:
        """Whether the index has the chat as its file is now: no re-read under way, none
        due (the steady step's test; `identify_request` waits for or does the re-read).
        A stat that finds the file saved leaves it due for `identify_request` to find."""
        return self._early.under_way(chat_id) is None and self._saved_since(chat_id) is None

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
        # New chats are the watcher's to index (their folder, their first read).
        if chat_id in self.index.entries:
            self._early.written(chat_id)

    async def _read_saved(self, chat_id: str) -> None:
        if self.freshness is not None:
            self.freshness.reading(chat_id)  # so its request skips the stat
        await self.refresh([Path(self._file(chat_id))])

    async def _reread(self, name: str) -> bool:
        """Re-read the chat file `name`, waiting for it at most `FRESHNESS_WAIT`; True if
        it was re-read in that time."""
        path = Path(name)
        try:
            # Bounded: a request never waits long for the mirror; past this it is
            # identified against what is indexed, and the re-read finishes anyway.
            await asyncio.wait_for(asyncio.shield(self.refresh([path])), FRESHNESS_WAIT)
        except TimeoutError:
            log.warning(
                "re-reading %s took over %.1f s; identifying without it", path, FRESHNESS_WAIT
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
        if named is not None:
            chats = [named]
        else:
            newest = prints(messages, span)
            chats = likely_chats(newest, self.index)
        for chat_id in chats:
            reading = self._early.under_way(chat_id)
            if reading is not None:
                await asyncio.wait({reading}, timeout=FRESHNESS_WAIT)
            saved = self._saved_since(chat_id)
            if saved is not None:
                await self._reread(saved)
        found = identify(messages, span, self.index, only=named, printed=newest)
        if found is None and log.isEnabledFor(logging.DEBUG):
            why = unidentified_reason(messages, span, self.index, only=named)
            log.debug("request not identified as any chat: %s", why)
        return RequestIdentity(found, replacements, span)

    # -- worker-thread side --------------------------------------------------------------

    def _reset_caches(self) -> None:
        self._groups.clear()
        self._personas.clear()
        self._formats.clear()
        if self.data_dir is not None:
            for settings in sorted(self.data_dir.glob("*/settings.json")):
                self._read_prompt_format(settings.parent.name)

    def _read_prompt_format(self, user: str) -> None:
        if self.data_dir is None:
            return
        found = read_prompt_format(self.data_dir / user)
        if found is None:
            self._formats.pop(user, None)
        else:
            self._formats[user] = found

    def prompt_formats(self) -> list[dict[str, Any]]:
        """How each user's ST writes text prompts: `{"instruct", "context"}` (read at
        indexing and when a settings.json changes, never per request)."""
        return list(self._formats.values())

    def _forget_missing(self, db: Database, seen: set[str]) -> list[Refreshed]:
        results = []
        for record in db.chats():
            if record.id not in seen:
                db.mark_deleted(record.id)
                results.append(Refreshed(record.id, (), None))
        for chat_id in db.purge_deleted():
            log.info("forgot chat deleted over a week ago: %s", chat_id)
        return results

    def _refresh_many(
        self, db: Database, rels: list[str], read: dict[str, Stat]
    ) -> list[Refreshed]:
        assert self.data_dir is not None
        results: list[Refreshed] = []
        # Deletions first: ST renames a chat by copying it, then deleting the original.
        present = [r for r in rels if (self.data_dir / r).exists()]
        for rel in rels:
            if rel in present:
                continue
            location = locate(rel)
            if location is not None and db.chat(location.chat_id) is not None:
                results.append(self._deleted(db, location.chat_id))
        for rel in rels:
            self._forget_user_file(PurePosixPath(rel))
        for rel in present:
            location = locate(rel)
            if location is not None:
                result = self._refresh_location(db, location, read=read)
                if result is not None:
                    results.append(result)
        return results

    def _refresh_location(
        self, db: Database, location: ChatLocation, *, read: dict[str, Stat], startup: bool = False
    ) -> Refreshed | None:
        """Re-read one chat file if it changed. `read` gets the stat of what was read; the
        event loop records it once the result is installed."""
        assert self.data_dir is not None
        path = self.data_dir / location.rel
        if not inside(self.data_dir, path):
            log.warning("not reading %s: it links outside the SillyTavern data folder", path)
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        record = db.chat(location.chat_id)
        stat_key = (stat.st_size, stat.st_mtime_ns)
        # Size and mtime decide only at start-up: a change event means the file changed,
        # even when two saves of the same size fell within one mtime tick.
        unchanged = record is not None and (record.size, record.mtime_ns) == stat_key
        if startup and unchanged and record is not None and not record.deleted:
            read[location.chat_id] = stat_key
            return Refreshed(location.chat_id, (), self._entry(db, record))
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("cannot read chat %s: %s", path, exc.strerror)
            return None
        read[location.chat_id] = stat_key
        renamed_from = None
        chat_id = location.chat_id
        before = self._splits.take(chat_id)
        if record is None:
            # A new file, read whole once: it may be a renamed chat's, which it then takes
            # over (its layout too).
            parsed = parse_chat(data, source=str(path), before=before)
            renamed_from = self._adopt_renamed(db, location, parsed)
            layout = db.layout(chat_id)
        else:
            layout = db.layout(chat_id)
            known = {d for _, d in layout}
            parsed = parse_chat(data, source=str(path), known=known, before=before)
        if not startup:  # not every chat at start-up: those ST is saving now
            self._splits.keep(chat_id, parsed.split)
        file_hash = file_digest(parsed.lines)
        if record is not None and not record.deleted and record.file_hash == file_hash:
            db.update_stat(chat_id, *stat_key)
            return Refreshed(chat_id, (), self._entry(db, record)) if startup else None
        digests = [line.digest for line in parsed.lines]
        plan = reconcile(
            layout,
            digests,
            lambda uids: db.old_messages(chat_id, uids),
            parsed.message,
        )
        header = parsed.header
        group = self._group_of(location)
        record = ChatRecord(
            id=location.chat_id,
            user=location.user,
            kind=location.kind,
            character=location.character,
            group_id=group.group_id if group else None,
            group_name=group.name if group else None,
            name=location.name,
            file=location.rel,
            integrity=header.integrity if header else None,
            main_chat=header.main_chat if header else None,
            enabled=record.enabled if record is not None else None,
            size=stat.st_size,
            mtime_ns=stat.st_mtime_ns,
            file_hash=file_hash,
            messages=len(parsed.messages),
            bad_lines=len(parsed.bad),
            updated=stat.st_mtime_ns / 1e9,
            deleted=False,
            metadata=orjson.dumps(header.chat_metadata).decode() if header else None,
            character_name=parsed.character_name() if location.kind == "character" else None,
        )
        events = db.save_chat(record, plan.uids, digests, parsed.message, plan.events, layout)
        entry = self._entry(db, record)
        return Refreshed(location.chat_id, tuple(events), entry, renamed_from, saved=True)

    def _adopt_renamed(self, db: Database, location: ChatLocation, parsed: ChatFile) -> str | None:
        """A new file whose integrity slug and content match a deleted chat: a rename."""
        integrity = parsed.header.integrity if parsed.header else None
        if not integrity:
            return None
        digests = [line.digest for line in parsed.lines]
        for old in db.deleted_with_integrity(integrity):
            old_digests = [digest for _, digest in db.layout(old.id)]
            if old_digests[: len(digests)] == digests[: len(old_digests)]:
                log.info("chat renamed: %s -> %s", old.id, location.chat_id)
                db.rename(old.id, location.chat_id)
                return old.id
        return None

    def _deleted(self, db: Database, chat_id: str) -> Refreshed:
        self._splits.take(chat_id)
        db.mark_deleted(chat_id)
        log.info("chat deleted (its data is kept): %s", chat_id)
        return Refreshed(chat_id, (), None)

    def _group_of(self, location: ChatLocation) -> GroupInfo | None:
        return self.group(location.user, location.name) if location.kind == "group" else None

    def group(self, user: str, chat_name: str) -> GroupInfo | None:
        """The group a group chat belongs to (`groups/*.json`, cached). Worker thread."""
        if self.data_dir is None:
            return None
        if user not in self._groups:
            self._groups[user] = read_groups(self.data_dir / user)
        return self._groups[user].get(chat_name)

    def persona(self, user: str) -> str:
        """The user's persona name from ST's settings (cached). Worker thread."""
        if user not in self._personas and self.data_dir is not None:
            self._personas[user] = read_persona_name(self.data_dir / user)
        return self._personas.get(user) or ""

    def _forget_user_file(self, rel: PurePosixPath) -> None:
        """Drop what a changed group file or settings.json made stale."""
        parts = rel.parts
        if len(parts) == 3 and parts[1] == "groups":
            self._groups.pop(parts[0], None)
        elif len(parts) == 2 and parts[1] == "settings.json":
            self._personas.pop(parts[0], None)
            self._read_prompt_format(parts[0])

    def _entry(self, db: Database, record: ChatRecord) -> ChatEntry:
        total, visible = db.speakers_tail(record.id, TAIL)
        persona = next((m.name for m in reversed(visible) if m.is_user), self.persona(record.user))
        tail = [
            indexed_message(
                m.position,
                m.is_user,
                m.name,
                m.text,
                # A group's {{char}} is whoever speaks; a character chat's, its character.
                char=m.name if record.kind == "group" else record.display_name,
                user=persona,
            )
            for m in visible
        ]
        # The request that follows a save carries the chat's newest messages: their
        # fingerprints are worked out here (worker thread), not on that request's way.
        for m in visible[-FORESEEN:]:
            message_fingerprint(m.text)
        return ChatEntry(
            chat_id=record.id,
            updated=record.updated or 0.0,
            total=total,
            tail=tail,
            name=record.name,
            group_name=record.group_name,
            enabled=record.enabled,
            world=record.own_world,
        )
