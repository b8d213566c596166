"""Take over what memory extensions stored in a chat (store thread).

Runs at the start of planning a looked-after chat, on the rows whose extension data
changed since the last time (`proxy.store.extensions`): the first time, everything the
extension ever wrote; later, what it wrote since (a user may keep it for a while).
Everything imported has `source: "imported"`.

Precedence, per item: the proxy's own work (its detection, its recaps, the user's edits
through the proxy, what a branch inherited) stands, and imported data never replaces
it; imported data stands in for work the proxy would otherwise do again, so a scene with
an imported recap gets no recap call, a message with an imported memory none either, and
a running recap imported as covering scene N is what gets injected, with no call. An
extension's break inside the stretch the proxy already split into its own scenes is not
taken: two segmentations of the same messages would make overlapping scenes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from proxy.core.entity_changes import Change
from proxy.sillytavern.extensions import (
    RUNNING_KEY,
    ImportedMessage,
    ImportedScene,
    running_versions,
)
from proxy.store import Database
from proxy.store.extensions import PendingExtension
from proxy.store.records import ChatRecord, MessageRecap, RunningRecap, SceneBreak

log = logging.getLogger(__name__)

IMPORTED = "imported"
SUMMARY_SCENE = "Summary"  # the name of the scene a Summarize summary closes


@dataclass(slots=True)
class Imported:
    """What one import did (counts of items written or changed)."""

    breaks: int = 0
    scene_recaps: int = 0
    message_recaps: int = 0
    running: int = 0
    skipped: int = 0  # items the proxy's own work, or missing messages, kept out

    @property
    def anything(self) -> bool:
        return bool(self.breaks or self.scene_recaps or self.message_recaps or self.running)


def import_chat(db: Database, chat: ChatRecord, now: float) -> Imported:
    """Import a chat's changed extension data, in one transaction."""
    done = Imported()
    pending = db.extensions.pending(chat.id)
    # The metadata as stored, hashed unparsed: planning runs after every job, and a long
    # story's metadata holds hundreds of running versions. Any change to it re-reads the
    # running versions (importing them is idempotent).
    mark = _mark(chat.metadata or "")
    if not pending and mark == db.extensions.running_mark(chat.id):
        return done
    metadata = chat.chat_metadata.get(RUNNING_KEY)
    with db.transaction():
        importer = _Importer(db, chat.id, now, done)
        summary = False
        for row in pending:
            try:
                data = ImportedMessage.parse(row.extension) if row.extension else ImportedMessage()
            except (ValueError, KeyError, TypeError):
                log.warning("%s: unreadable extension data on message %d", chat.id, row.position)
                continue
            importer.message(row, data)
            summary = summary or data.summary is not None
        db.extensions.imported(row.uid for row in pending)
        if metadata is not None and mark != db.extensions.running_mark(chat.id):
            importer.running(metadata)
        elif summary and metadata is None:
            importer.summary()
        db.extensions.set_running_mark(chat.id, mark)
        importer.checked()
    if done.anything:
        log.info(
            "%s: imported %d scene break(s), %d scene recap(s), %d message recap(s), "
            "%d running recap version(s) from a memory extension",
            chat.id, done.breaks, done.scene_recaps, done.message_recaps, done.running,
        )  # fmt: skip
    return done


def _mark(metadata: str) -> str:
    return hashlib.blake2b(metadata.encode(), digest_size=12).hexdigest()


class _Importer:
    def __init__(self, db: Database, chat_id: str, now: float, done: Imported) -> None:
        self.db = db
        self.memory = db.memory
        self.chat_id = chat_id
        self.now = now
        self.done = done
        self.breaks = {b.uid: b for b in self.memory.breaks(chat_id)}
        # The end of the stretch the proxy split into scenes of its own.
        self.own_last = max(
            (b.position for b in self.breaks.values() if b.source != IMPORTED), default=-1
        )
        self.recaps = self.memory.message_recaps(chat_id)
        self.newest_checked: PendingExtension | None = None

    # -- messages ------------------------------------------------------------------------

    def message(self, row: PendingExtension, data: ImportedMessage) -> None:
        self.scene(row.uid, row.position, data.scene)
        self.message_recaps(row, data)
        if data.excluded:
            self.memory.set_excluded(self.chat_id, row.uid, True)
        if data.checked:
            self.newest_checked = row

    def scene(self, uid: int, position: int, scene: ImportedScene | None) -> None:
        """The extension's break on message `uid` (at `position`), or its absence."""
        existing = self.breaks.get(uid)
        if existing is not None and existing.source != IMPORTED:
            if scene is not None:
                self.done.skipped += 1
            return
        if scene is None:
            if existing is not None and all(
                r.source == IMPORTED for r in self.memory.scene_recaps(uid)
            ):
                self.memory.remove_break(uid)  # removed in ST: it goes here too
                del self.breaks[uid]
            return
        if existing is None:
            if position <= self.own_last:
                self.done.skipped += 1
                return
            self.memory.set_break(self.chat_id, uid, IMPORTED, self.now)
            self.done.breaks += 1
        self.scene_versions(uid, scene, existing)

    def scene_versions(self, uid: int, scene: ImportedScene, existing: SceneBreak | None) -> None:
        """The extension's recap versions of the scene on message `uid`, each taken once;
        its name unless you named the scene; and its selected version, unless one of the
        proxy's own is selected."""
        versions = self.memory.scene_recaps(uid)
        fields: dict[str, object] = {"visible": int(scene.visible)}
        if existing is None or not existing.name_edited:
            fields["name"] = scene.name or next((n for _, n in reversed(scene.versions) if n), None)
        self.memory.update_break(uid, **fields)
        selected = existing.current if existing is not None else None
        ours = any(r.version == selected and r.source != IMPORTED for r in versions)
        known = {r.recap: r.version for r in versions if r.source == IMPORTED}
        numbers: dict[int, int] = {}
        for i, (recap, name) in enumerate(scene.versions):
            if recap not in known:
                known[recap] = self.memory.add_scene_recap(
                    self.chat_id, uid, recap, self.now,
                    scene_name=name or scene.name, source=IMPORTED,
                )  # fmt: skip
                self.done.scene_recaps += 1
            numbers[i] = known[recap]
        target = numbers.get(scene.current) if scene.current is not None else None
        current = selected if ours or target is None else target
        self.memory.update_break(uid, current=current)
        found = self.memory.scene_break(uid)
        if found is not None:
            self.breaks[uid] = found

    def message_recaps(self, row: PendingExtension, data: ImportedMessage) -> None:
        hashes: list[str] = orjson.loads(row.swipe_hashes)
        wanted = dict(data.swipes)
        if data.recap is not None:
            wanted[row.swipe] = (data.recap, data.edited)
        swipes = set(wanted) | {swipe for uid, swipe in self.recaps if uid == row.uid}
        for swipe in sorted(swipes):
            done: MessageRecap | None = self.recaps.get((row.uid, swipe))
            if done is not None and done.source != IMPORTED:
                if swipe in wanted:
                    self.done.skipped += 1
                continue
            if swipe not in wanted:
                if done is not None:
                    self.memory.drop_message_recap(row.uid, swipe)
                continue
            text, edited = wanted[swipe]
            if done is not None and (done.recap, done.edited) == (text, edited):
                continue
            # Made from the text the swipe has now: the extension kept it current.
            source = hashes[swipe] if swipe != row.swipe and swipe < len(hashes) else row.text_hash
            self.memory.put_message_recap(
                self.chat_id, row.uid, swipe, source, text, self.now,
                edited=edited, source=IMPORTED,
            )  # fmt: skip
            self.done.message_recaps += 1

    def checked(self) -> None:
        """Detection goes on after what the extension's detection already looked at."""
        row = self.newest_checked
        if row is None:
            return
        last = max((b.position for b in self.breaks.values() if b.visible), default=-1)
        state = self.memory.state(self.chat_id)
        before = self.memory.position_of(state.checked_uid if state else None)
        if row.position > last and (before is None or row.position > before):
            self.memory.set_state(self.chat_id, checked_uid=row.uid)

    # -- running recap -----------------------------------------------------------------------

    def running(self, metadata: object) -> None:
        """ST-Auto-Recap's running recap versions (from the chat's metadata)."""
        versions, selected = running_versions({RUNNING_KEY: metadata})
        usable = {b.uid for b in self.breaks.values() if b.visible and b.current is not None}
        existing = {
            (r.content, r.new_scene_uid): r.version
            for r in self.memory.running_recaps(self.chat_id)
            if r.source == IMPORTED
        }
        before = self.memory.state(self.chat_id)
        numbers: dict[int, int] = {}
        for item in sorted(versions, key=lambda v: v.version):
            uid = self.memory.uid_at(self.chat_id, item.new_scene_index)
            if uid is None or uid not in usable:
                self.done.skipped += 1  # its scene is not one of this chat's scenes here
                continue
            if (item.content, uid) not in existing:
                prev = item.prev_scene_index
                existing[item.content, uid] = self.memory.add_running(
                    self.chat_id,
                    item.content,
                    item.timestamp or self.now,
                    scene_count=item.scene_count,
                    prev_scene_uid=None if prev is None else self.memory.uid_at(self.chat_id, prev),
                    new_scene_uid=uid,
                    source=IMPORTED,
                )
                self.done.running += 1
            numbers[item.version] = existing[item.content, uid]
        target = numbers.get(selected) if selected is not None else None
        if target is None and numbers:
            target = numbers[max(numbers)]
        self._select(before.current_recap if before else None, target)

    def summary(self) -> None:
        """ST's Summarize: its newest summary is the story up to its message. It closes a
        scene there whose recap is the summary, and is the running recap through it."""
        found = self.db.extensions.latest_summary(self.chat_id)
        if found is None:
            return
        uid, position, text = found
        existing = self.breaks.get(uid)
        if existing is None and position <= self.own_last:
            self.done.skipped += 1
            return
        scene = ImportedScene(True, SUMMARY_SCENE, ((text, SUMMARY_SCENE),), 0)
        self.scene(uid, position, scene)
        found_break = self.breaks.get(uid)
        if found_break is None or found_break.source != IMPORTED:
            return
        versions = self.memory.running_recaps(self.chat_id)
        if any(
            r.source == IMPORTED and (r.content, r.new_scene_uid) == (text, uid) for r in versions
        ):
            return
        state = self.memory.state(self.chat_id)
        scenes = sum(1 for b in self.breaks.values() if b.visible and b.position <= position)
        earlier = [b for b in self.breaks.values() if b.visible and b.position < position]
        version = self.memory.add_running(
            self.chat_id, text, self.now, scene_count=scenes,
            prev_scene_uid=max(earlier, key=lambda b: b.position).uid if earlier else None,
            new_scene_uid=uid, source=IMPORTED,
        )  # fmt: skip
        self.done.running += 1
        self._select(state.current_recap if state else None, version)

    def _select(self, before: int | None, target: int | None) -> None:
        """Select the imported version, unless the proxy's own selected version covers at
        least as much of the story (adding a version selects it: undo that then)."""
        keep = before
        if target is not None:
            mine = self.memory.running_version(self.chat_id, before) if before else None
            if (
                mine is None
                or mine.source == IMPORTED
                or self._reach(mine)
                < self._reach(self.memory.running_version(self.chat_id, target))
            ):
                keep = target
        self.memory.set_state(self.chat_id, current_recap=keep)

    def _reach(self, version: RunningRecap | None) -> int:
        if version is None:
            return -1
        position = self.memory.position_of(version.new_scene_uid)
        return -1 if position is None else position


def import_entities(db: Database, chat_id: str, found: Sequence[Change], now: float) -> int:
    """Keep the entities an extension holds (`import` changes) that are new or changed
    since they were last imported; how many. What the proxy's scenes say of them, and
    what the user did to them, stand beside (`proxy.core.entity_changes`)."""
    kept = {c.key.casefold(): c for c in db.entities.changes(chat_id) if c.kind == "import"}
    added = 0
    with db.transaction():
        for change in found:
            was = kept.get(change.key.casefold())
            if was is not None and dataclasses.replace(was, id=0, made=0.0) == change:
                continue
            db.entities.change(chat_id, change, now)
            added += 1
    if added:
        log.info("%s: imported %d entit(y/ies) from its memory extension's lorebook",
                 chat_id, added)  # fmt: skip
    return added
