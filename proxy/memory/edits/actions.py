"""What a user can see and correct in a chat's memory (the API and CLI call these).

Reads and writes run on the store's thread (what is shown: `proxy.memory.views.readout`); every
correction then re-plans the chat, so that what depends on it follows (a new break gets
its recap, an edited scene recap is folded in again). Scenes are named by their last
message's ST index, messages by theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from proxy.core.export import Exported
from proxy.core.jsontypes import JSONObject
from proxy.core.operations import Operation, job_key
from proxy.errors import Conflict, NotFound
from proxy.memory.chatinfo import swipe_of
from proxy.memory.edits.carry import copy_running, gather
from proxy.memory.edits.entities import EntityEdits
from proxy.memory.running import covered_through, drop_running_from
from proxy.memory.views import readout
from proxy.memory.views.view import MemoryView
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database, Store
from proxy.store.jobs import Payload
from proxy.store.records import ChatRecord, MessageRecord, SceneBreak

T = TypeVar("T")


class Planner(Protocol):
    """The memory engine, as a correction needs it."""

    @property
    def views(self) -> Mapping[str, MemoryView]: ...

    def clock(self) -> float: ...

    async def plan_now(self, chat_id: str, *, since: int | None = None) -> int: ...

    async def activate(self, chat_id: str, *, backfill: bool = False) -> int: ...

    def stamp(
        self, db: Database, chat_id: str, operation: Operation, key: str, payload: Payload
    ) -> tuple[int | None, bool]: ...

    def wake(self) -> None: ...

    def can_call(self, chat_id: str) -> bool: ...

    def memory_on(self, chat_id: str, own_state: bool | None) -> bool: ...

    def upkeep_on(self, chat_id: str, own_state: bool | None) -> bool: ...

    def messages_until_check(self, db: Database, chat_id: str) -> int | None: ...

    def check_now(self, db: Database, chat_id: str) -> int | None: ...


class ChatSwitch(Protocol):
    """The library's per-chat on/off (it owns the index the chat path reads)."""

    async def set_enabled(self, chat_id: str, enabled: bool | None) -> None: ...


class MemoryActions:
    def __init__(self, store: Store, engine: Planner, switch: ChatSwitch) -> None:
        self.store = store
        self.engine = engine
        self.switch = switch
        self.entities = EntityEdits(self)

    @staticmethod
    def chat_of(db: Database, chat_id: str) -> ChatRecord:
        chat = db.chat(chat_id)
        if chat is None or chat.deleted:
            raise NotFound(f"no chat {chat_id!r}")
        return chat

    def _uid(self, db: Database, chat_id: str, index: int) -> int:
        self.chat_of(db, chat_id)
        uid = db.memory.uid_at(chat_id, index)
        if uid is None:
            raise NotFound(f"chat {chat_id!r} has no message {index}")
        return uid

    def _scene(self, db: Database, chat_id: str, index: int) -> SceneBreak:
        scene = db.memory.scene_break(self._uid(db, chat_id, index))
        if scene is None:
            raise NotFound(f"no scene ends at message {index} of {chat_id!r}")
        return scene

    async def then_plan(
        self, chat_id: str, work: Callable[[Database], T], since: int | None = None
    ) -> T:
        result = await self.store.call(work)
        await self.engine.plan_now(chat_id, since=since)
        return result

    # -- overview -----------------------------------------------------------------------------

    async def overview(self, chat_id: str) -> JSONObject:
        def work(db: Database) -> JSONObject:
            chat = self.chat_of(db, chat_id)
            on = self.engine.memory_on(chat_id, chat.enabled)
            check_in = self.engine.messages_until_check(db, chat_id)
            return readout.overview(db, chat, self.engine.views.get(chat_id), on, check_in)

        return await self.store.call(work)

    async def set_enabled(self, chat_id: str, enabled: bool | None) -> JSONObject:
        await self.store.call(lambda db: self.chat_of(db, chat_id))
        await self.switch.set_enabled(chat_id, enabled)
        if enabled:
            await self.engine.activate(chat_id)
        else:
            await self.engine.plan_now(chat_id)
        return await self.overview(chat_id)

    async def visible_messages(self, chat_id: str) -> list[MessageRecord]:
        def work(db: Database) -> list[MessageRecord]:
            self.chat_of(db, chat_id)
            return [r for r in db.messages(chat_id) if not r.message.hidden]

        return await self.store.call(work)

    async def backfill(self, chat_id: str) -> JSONObject:
        chat = await self.store.call(lambda db: self.chat_of(db, chat_id))
        # Off (`[memory] enabled`, or the chat's own switch as `[injection]` counts it),
        # the chat gets no upkeep: the caller says so rather than wait for none.
        on = self.engine.upkeep_on(chat_id, chat.enabled)
        queued = await self.engine.activate(chat_id, backfill=True)
        waiting = on and not self.engine.can_call(chat_id)
        return {"chat": chat_id, "queued": queued, "waiting_for_model": waiting, "memory_on": on}

    # -- scenes ------------------------------------------------------------------------------

    async def scenes(self, chat_id: str) -> list[JSONObject]:
        def work(db: Database) -> list[JSONObject]:
            self.chat_of(db, chat_id)
            return readout.scenes(db, chat_id)

        return await self.store.call(work)

    async def scene(self, chat_id: str, index: int) -> JSONObject:
        return await self.store.call(lambda db: readout.scene(db, self._scene(db, chat_id, index)))

    async def set_break(self, chat_id: str, index: int, visible: bool = True) -> JSONObject:
        def work(db: Database) -> None:
            uid = self._uid(db, chat_id, index)
            if db.memory.scene_break(uid) is None:
                db.memory.set_break(chat_id, uid, "manual", self.engine.clock())
            db.memory.update_break(uid, visible=int(visible))

        await self.then_plan(chat_id, work, since=index)
        return await self.scene(chat_id, index)

    async def check_scenes_now(self, chat_id: str) -> JSONObject:
        """A scene-break check of the open scene, now rather than after
        `scene_break_every` more messages."""

        def work(db: Database) -> int:
            self.chat_of(db, chat_id)
            job = self.engine.check_now(db, chat_id)
            if job is None:
                raise Conflict(
                    "no scene-break check can run now: the open scene is shorter than "
                    "[memory] minimum_scene_length plus its newest context messages, or a "
                    "check is running already"
                )
            return job

        job = await self.store.call(work)
        self.engine.wake()
        return {"job": job}

    async def remove_break(self, chat_id: str, index: int) -> JSONObject:
        def work(db: Database) -> None:
            scene = self._scene(db, chat_id, index)
            db.memory.remove_break(scene.uid)
            # The scene merges with the next one: detection looks at it again.
            db.memory.set_state(chat_id, checked_uid=None)

        await self.then_plan(chat_id, work, since=index)
        return {"removed": index}

    async def update_scene(
        self, chat_id: str, index: int, *, name: str | None, current_version: int | None
    ) -> JSONObject:
        def work(db: Database) -> JSONObject:
            scene = self._scene(db, chat_id, index)
            if name is not None:
                db.memory.update_break(scene.uid, name=name.strip(), name_edited=1)
            if current_version is None:
                return {}
            known = {v.version for v in db.memory.scene_recaps(scene.uid)}
            if current_version not in known:
                raise NotFound(f"scene {index} has no recap version {current_version}")
            db.memory.update_break(scene.uid, current=current_version)
            return {"folded_in_again": drop_running_from(db, chat_id, scene.position)}

        folded = await self.then_plan(chat_id, work)
        return {**await self.scene(chat_id, index), **folded}

    async def edit_scene_recap(
        self, chat_id: str, index: int, recap: str, scene_name: str | None
    ) -> JSONObject:
        def work(db: Database) -> bool:
            scene = self._scene(db, chat_id, index)
            db.memory.add_scene_recap(
                chat_id, scene.uid, recap.strip(), self.engine.clock(),
                scene_name=scene_name, source="edit",
            )  # fmt: skip
            return drop_running_from(db, chat_id, scene.position)

        folded = await self.then_plan(chat_id, work)
        # False: a running recap version you wrote comes after this scene; it stays.
        return {**await self.scene(chat_id, index), "folded_in_again": folded}

    async def regenerate_scene(self, chat_id: str, index: int) -> JSONObject:
        def work(db: Database) -> int:
            scene = self._scene(db, chat_id, index)
            key = job_key(Operation.SCENE_RECAP, chat_id, scene.uid)
            return self._enqueue(db, chat_id, Operation.SCENE_RECAP, key, {"break": scene.uid})

        return {"job": await self.store.call(work)}

    # -- running recap ----------------------------------------------------------------------

    async def running(self, chat_id: str) -> list[JSONObject]:
        def work(db: Database) -> list[JSONObject]:
            self.chat_of(db, chat_id)
            return readout.running_versions(db.memory, chat_id)

        return await self.store.call(work)

    async def edit_running(self, chat_id: str, content: str) -> JSONObject:
        def work(db: Database) -> int:
            self.chat_of(db, chat_id)
            current = db.memory.current_running(chat_id)
            if current is None:
                raise Conflict("there is no running recap to edit yet")
            return int(
                db.memory.add_running(
                    chat_id, content.strip(), self.engine.clock(),
                    scene_count=current.scene_count, prev_scene_uid=current.prev_scene_uid,
                    new_scene_uid=current.new_scene_uid, source="edit",
                )
            )  # fmt: skip

        version = await self.then_plan(chat_id, work)
        return {"version": version}

    async def select_running(self, chat_id: str, version: int) -> JSONObject:
        def work(db: Database) -> None:
            self.chat_of(db, chat_id)
            if version not in {v.version for v in db.memory.running_recaps(chat_id)}:
                raise NotFound(f"no running recap version {version} in {chat_id!r}")
            db.memory.set_state(chat_id, current_recap=version)

        await self.then_plan(chat_id, work)
        return {"current_version": version}

    async def copy_from(self, chat_id: str, other: str) -> JSONObject:
        """Start this chat from another chat's current running recap."""
        version = await self.store.call(
            lambda db: copy_running(db, chat_id, other, self.engine.clock())
        )
        await self.engine.activate(chat_id)
        return {"version": version, "copied_from": other}

    async def export(self, chat_id: str) -> Exported:
        return await self.store.call(lambda db: gather(db, chat_id))

    async def regenerate_running(self, chat_id: str) -> JSONObject:
        def work(db: Database) -> int:
            self.chat_of(db, chat_id)
            current = db.memory.current_running(chat_id)
            if current is None or current.new_scene_uid is None:
                raise Conflict("there is no running recap to regenerate yet")
            uid = current.new_scene_uid
            key = job_key(Operation.RUNNING_RECAP, chat_id, uid, again=True)
            payload: Payload = {"scene": uid, "again": True}
            return self._enqueue(db, chat_id, Operation.RUNNING_RECAP, key, payload)

        return {"job": await self.store.call(work)}

    # -- message recaps ------------------------------------------------------------------------

    async def message_recaps(self, chat_id: str) -> list[JSONObject]:
        def work(db: Database) -> list[JSONObject]:
            self.chat_of(db, chat_id)
            return readout.message_recaps(db, chat_id, self.engine.views.get(chat_id))

        return await self.store.call(work)

    async def edit_message_recap(self, chat_id: str, index: int, recap: str) -> JSONObject:
        def work(db: Database) -> None:
            uid = self._uid(db, chat_id, index)
            record = db.memory.messages_by_uid([uid])[uid]
            db.memory.put_message_recap(
                chat_id, uid, swipe_of(record), text_hash(record.message.mes), recap.strip(),
                self.engine.clock(), edited=True,
            )  # fmt: skip

        await self.then_plan(chat_id, work)
        return {"index": index, "recap": recap.strip(), "edited": True}

    async def clear_message_recap(self, chat_id: str, index: int) -> JSONObject:
        """The message's recap (of its current swipe) is gone; the memory makes it again
        when it is due (exclude the message to keep it without one)."""

        def work(db: Database) -> bool:
            uid = self._uid(db, chat_id, index)
            record = db.memory.messages_by_uid([uid])[uid]
            return db.memory.delete_message_recap(uid, swipe_of(record))

        cleared = await self.then_plan(chat_id, work)
        return {"index": index, "cleared": bool(cleared)}

    async def exclude_message(self, chat_id: str, index: int, excluded: bool) -> JSONObject:
        def work(db: Database) -> None:
            db.memory.set_excluded(chat_id, self._uid(db, chat_id, index), excluded)

        await self.then_plan(chat_id, work)
        return {"index": index, "excluded": excluded}

    async def regenerate_message(self, chat_id: str, index: int) -> JSONObject:
        def work(db: Database) -> int:
            uid = self._uid(db, chat_id, index)
            record = db.memory.messages_by_uid([uid])[uid]
            covered = covered_through(db, chat_id)
            if record.position <= covered:
                # The one reason the job would not be made, said as such (not "nothing").
                raise Conflict(
                    f"message {index} is covered by the running recap (through message "
                    f"{covered}): a recap of it would never be used"
                )
            payload: Payload = {"items": [[uid, swipe_of(record), text_hash(record.message.mes)]]}
            key = job_key(Operation.MESSAGE_RECAP, chat_id, uid, again=True)
            return self._enqueue(db, chat_id, Operation.MESSAGE_RECAP, key, payload)

        return {"job": await self.store.call(work)}

    def _enqueue(
        self, db: Database, chat_id: str, operation: Operation, key: str, payload: Payload
    ) -> int:
        job_id, _ = self.engine.stamp(db, chat_id, operation, key, payload)
        if job_id is None:
            raise Conflict(f"nothing to {operation.value.replace('_', ' ')} there")
        # Asked for by the user: a job that failed on this same input runs again.
        db.jobs.retry(job_id, self.engine.clock())
        self.engine.wake()
        return job_id
