"""The mirror of ST's chat files in the store: the worker-thread side of `ChatLibrary`.

Every method runs on the store's one thread (`Store.call`): it reads a chat file, parses
only the lines that changed (see `proxy.sillytavern.chatfile`), reconciles them with what
the store holds and writes the result, then hands back the index entry that the event
loop installs (`Refreshed`). The group, persona and prompt-format files ST keeps beside
the chats are read here too, and cached until they change.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from proxy.core.fingerprints import indexed_message, message_fingerprint
from proxy.core.regex_scripts import NONE as NO_SCRIPTS
from proxy.core.regex_scripts import PromptScripts, prompt_scripts
from proxy.identify.chat_index import TAIL, ChatEntry
from proxy.identify.reasoning import DEFAULT_REASONING, ReasoningFormat, reasoning_format
from proxy.sillytavern.chatfile import ChatFile, RecentSplits, file_digest, parse_chat
from proxy.sillytavern.layout import (
    ChatLocation,
    GroupInfo,
    inside,
    locate,
    read_groups,
    read_persona_name,
    read_prompt_format,
    read_regex_scripts,
)
from proxy.sillytavern.reconcile import Event, reconcile
from proxy.store import ChatRecord, Database

log = logging.getLogger(__name__)
Stat = tuple[int, int]  # a chat file's (size, mtime_ns)
# A chat's newest messages whose fingerprints are worked out when it is indexed: those a
# save added (a reply and the user's next message, or a few more), which the request that
# follows carries for the first time.
FORESEEN = 4


@dataclass(frozen=True, slots=True)
class Refreshed:
    """What one refresh did: the chat, its events, and the index entry to install."""

    chat_id: str
    events: tuple[Event, ...]
    entry: ChatEntry | None  # None: the chat is gone
    renamed_from: str | None = None
    saved: bool = False  # the file was written anew (its metadata may have changed)
    # The file's hash as the store held it before this re-read, and holds it now: what
    # was built from the store tells by them which version it was built from.
    replaced: bytes | None = None
    file_hash: bytes | None = None


class Mirror:
    """Reads ST's files into the store. Worker thread only."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        self._groups: dict[str, dict[str, GroupInfo]] = {}
        self._personas: dict[str, str | None] = {}
        # user -> the regex scripts its ST runs on a prompt (`proxy.core.regex_scripts`)
        self._scripts: dict[str, PromptScripts] = {}
        # user -> its ST's instruct, context and reasoning templates (`read_prompt_format`)
        self._formats: dict[str, dict[str, Any]] = {}
        # The users' reasoning formats, ST's default last (see `proxy.identify.reasoning`).
        self.reasoning: tuple[ReasoningFormat, ...] = (DEFAULT_REASONING,)
        # The last split of each chat file re-read after start-up (the chats being saved):
        # its next save is split without hashing the lines it kept.
        self.splits = RecentSplits()

    def reset_caches(self) -> None:
        self._groups.clear()
        self._personas.clear()
        self._scripts.clear()
        self._formats.clear()
        self.reasoning = (DEFAULT_REASONING,)
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
        forms = [reasoning_format(f["reasoning"]) for f in self._formats.values()]
        self.reasoning = tuple(dict.fromkeys([*filter(None, forms), DEFAULT_REASONING]))

    def prompt_formats(self) -> list[dict[str, Any]]:
        """How each user's ST writes prompts: `{"instruct", "context", "reasoning"}` (read at
        indexing and when a settings.json changes, never per request)."""
        return list(self._formats.values())

    def forget_missing(self, db: Database, seen: set[str]) -> list[Refreshed]:
        results = []
        for record in db.chats():
            if record.id not in seen:
                db.mark_deleted(record.id)
                results.append(Refreshed(record.id, (), None))
        for chat_id in db.purge_deleted():
            log.info("forgot chat deleted over a week ago: %s", chat_id)
        return results

    def refresh_many(self, db: Database, rels: list[str], read: dict[str, Stat]) -> list[Refreshed]:
        assert self.data_dir is not None
        results: list[Refreshed] = []
        # Deletions first: ST renames a chat by copying it, then deleting the original.
        present = [r for r in rels if (self.data_dir / r).exists()]
        for rel in rels:
            if rel in present:
                continue
            location = locate(rel)
            record = db.chat(location.chat_id) if location is not None else None
            # Once: the OS's notification and the watcher's batch may both name the file.
            if location is not None and record is not None and not record.deleted:
                results.append(self._deleted(db, location.chat_id))
        for rel in rels:
            self._forget_user_file(PurePosixPath(rel))
        for rel in present:
            location = locate(rel)
            if location is not None:
                result = self.refresh_location(db, location, read=read)
                if result is not None:
                    results.append(result)
        return results

    def refresh_location(
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
            return Refreshed(location.chat_id, (), self.entry(db, record))
        data = read_chat_file(path)
        if data is None:
            return None
        read[location.chat_id] = stat_key
        renamed_from = None
        chat_id = location.chat_id
        before = self.splits.take(chat_id)
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
            self.splits.keep(chat_id, parsed.split)
        file_hash = file_digest(parsed.lines)
        if record is not None and not record.deleted and record.file_hash == file_hash:
            db.update_stat(chat_id, *stat_key)
            return Refreshed(chat_id, (), self.entry(db, record)) if startup else None
        digests = [line.digest for line in parsed.lines]
        plan = reconcile(
            layout,
            digests,
            lambda uids: db.old_messages(chat_id, uids),
            parsed.message,
        )
        replaced = record.file_hash if record is not None and not record.deleted else None
        # The user's own on/off for the chat is kept.
        enabled = record.enabled if record is not None else None
        group = self._group_of(location)
        record = chat_record(location, group, parsed, stat_key, file_hash, enabled)
        events = db.save_chat(record, plan.uids, digests, parsed.message, plan.events, layout)
        entry = self.entry(db, record)
        return Refreshed(
            chat_id,
            tuple(events),
            entry,
            renamed_from,
            saved=True,
            replaced=replaced,
            file_hash=record.file_hash,
        )

    def _adopt_renamed(self, db: Database, location: ChatLocation, parsed: ChatFile) -> str | None:
        """A new file whose integrity slug and content match a deleted chat: a rename. A
        group chat from before ST 1.15 has no slug (nor header): then a deleted group chat
        of the user's whose file was this one, line for line."""
        integrity = parsed.header.integrity if parsed.header else None
        digests = [line.digest for line in parsed.lines]
        if integrity:
            olds = db.deleted_with_integrity(integrity)
        elif location.kind == "group" and digests:
            olds = db.deleted_group_copies(location.user, file_digest(parsed.lines))
        else:
            return None
        for old in olds:
            old_digests = [digest for _, digest in db.layout(old.id)]
            if old_digests[: len(digests)] == digests[: len(old_digests)]:
                log.info("chat renamed: %s -> %s", old.id, location.chat_id)
                db.rename(old.id, location.chat_id)
                return old.id
        return None

    def _deleted(self, db: Database, chat_id: str) -> Refreshed:
        self.splits.take(chat_id)
        db.mark_deleted(chat_id)
        log.info("chat deleted (its data is kept): %s", chat_id)
        return Refreshed(chat_id, (), None)

    def _group_of(self, location: ChatLocation) -> GroupInfo | None:
        if location.kind != "group":
            return None
        return self.group(location.user, location.name, reading=True)

    def group(self, user: str, chat_name: str, *, reading: bool = False) -> GroupInfo | None:
        """The group a group chat belongs to (`groups/*.json`, cached). Worker thread.

        `reading`: the chat's file is being read. One the cached groups do not name has them
        read again then: ST writes a new group chat's group file (its chat list, a branch's
        parent before ST 1.15) before the chat, and the chat's first save may be read
        before the watcher names that file. Other lookups (the lore's, after every
        generation) take the cache as it is: a chat no group names costs them no read."""
        if self.data_dir is None:
            return None
        groups = self._groups.get(user)
        if groups is None or (reading and chat_name not in groups):
            groups = self._groups[user] = read_groups(self.data_dir / user)
        return groups.get(chat_name)

    def persona(self, user: str) -> str:
        """The user's persona name from ST's settings (cached). Worker thread."""
        if user not in self._personas and self.data_dir is not None:
            self._personas[user] = read_persona_name(self.data_dir / user)
        return self._personas.get(user) or ""

    def scripts(self, user: str) -> PromptScripts:
        """The regex scripts the user's ST runs on a prompt (cached; read again when
        settings.json changes). Worker thread."""
        if user not in self._scripts:
            found = NO_SCRIPTS
            if self.data_dir is not None:
                found = prompt_scripts(read_regex_scripts(self.data_dir / user))
                for problem in found.problems:
                    log.warning("%s: %s; left out of the memory's prompts", user, problem)
            self._scripts[user] = found
        return self._scripts[user]

    def _forget_user_file(self, rel: PurePosixPath) -> None:
        """Drop what a changed group file or settings.json made stale."""
        parts = rel.parts
        if len(parts) == 3 and parts[1] == "groups":
            self._groups.pop(parts[0], None)
        elif len(parts) == 2 and parts[1] == "settings.json":
            self._personas.pop(parts[0], None)
            self._scripts.pop(parts[0], None)
            self._read_prompt_format(parts[0])

    def entry(self, db: Database, record: ChatRecord) -> ChatEntry:
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


def _main_chat(group: GroupInfo | None, name: str) -> str | None:
    """A headerless group chat's parent (ST before 1.15 kept it in the group's file)."""
    return group.main_chats.get(name) if group is not None else None


def read_chat_file(path: Path) -> bytes | None:
    """A chat file's bytes, or None when it cannot be read now (said in the log): gone
    since it was seen (its rename's or deletion's event comes next), or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        log.debug("chat %s went before it was read", path)
        return None
    except OSError as exc:
        log.warning("cannot read chat %s: %s", path, exc.strerror)
        return None


def chat_record(
    location: ChatLocation,
    group: GroupInfo | None,
    parsed: ChatFile,
    stat: tuple[int, int],
    file_hash: bytes,
    enabled: bool | None = None,
) -> ChatRecord:
    """The store's record of a chat file as read: where it is, whose it is, what its
    header says (its integrity slug, the chat it branched from), its size and time, and
    `enabled`, the user's own on/off for it (None: the default)."""
    header = parsed.header
    size, mtime_ns = stat
    return ChatRecord(
        id=location.chat_id,
        user=location.user,
        kind=location.kind,
        character=location.character,
        group_id=group.group_id if group else None,
        group_name=group.name if group else None,
        name=location.name,
        file=location.rel,
        integrity=header.integrity if header else None,
        main_chat=header.main_chat if header else _main_chat(group, location.name),
        enabled=enabled,
        size=size,
        mtime_ns=mtime_ns,
        file_hash=file_hash,
        messages=len(parsed.messages),
        bad_lines=len(parsed.bad),
        updated=mtime_ns / 1e9,
        deleted=False,
        metadata=orjson.dumps(header.chat_metadata).decode() if header else None,
        character_name=parsed.character_name() if location.kind == "character" else None,
    )
