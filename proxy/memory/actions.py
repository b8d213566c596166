"""What a user can see and correct in a chat's memory (the API and CLI call these).

Reads and writes run on the store's thread; every correction then re-plans the chat, so
that what depends on it follows (a new break gets its recap, an edited scene recap is
folded in again). Scenes are named by their last message's ST index, messages by theirs.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import Conflict, NotFound
from proxy.memory.engine import MemoryEngine
from proxy.memory.handlers import swipe_of
from proxy.sillytavern.chatfile import text_hash
from proxy.store.memory import SceneBreak
from proxy.store.records import MessageRecord

JSON = dict[str, Any]


class MemoryActions:
    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine
        self.library = engine.library

    @property
    def memory(self) -> Any:
        return self.library.store.memory

    def _chat(self, chat_id: str) -> Any:
        chat = self.library.store.chat(chat_id)
        if chat is None or chat.deleted:
            raise NotFound(f"no chat {chat_id!r}")
        return chat

    def _uid(self, chat_id: str, index: int) -> int:
        self._chat(chat_id)
        uid = self.memory.uid_at(chat_id, index)
        if uid is None:
            raise NotFound(f"chat {chat_id!r} has no message {index}")
        return int(uid)

    def _scene(self, chat_id: str, index: int) -> SceneBreak:
        scene = self.memory.scene_break(self._uid(chat_id, index))
        if scene is None:
            raise NotFound(f"no scene ends at message {index} of {chat_id!r}")
        return scene  # type: ignore[no-any-return]

    async def _then_plan(self, chat_id: str, work: Any, since: int | None = None) -> Any:
        result = await self.library.run(work)
        await self.engine.plan_now(chat_id, since=since)
        return result

    # -- overview -----------------------------------------------------------------------------

    async def overview(self, chat_id: str) -> JSON:
        def work() -> JSON:
            chat = self._chat(chat_id)
            state = self.memory.state(chat_id)
            current = self.memory.current_running(chat_id)
            jobs = self.library.store.jobs.list(chat_id, ("queued", "running", "failed"))
            view = self.engine.views.get(chat_id)
            return {
                "chat": chat_id,
                "enabled": chat.enabled,
                "active": bool(state and state.active),
                "scenes": len([b for b in self.memory.breaks(chat_id) if b.visible]),
                "running_recap": _running_json(self.memory, current, current) if current else None,
                "message_recaps": len(self.memory.message_recaps(chat_id)),
                "left_out_through": view.cutoff if view else None,
                "queue": {
                    state: sum(1 for j in jobs if j.state == state)
                    for state in ("queued", "running", "failed")
                },
            }

        return await self.library.run(work)

    async def set_enabled(self, chat_id: str, enabled: bool | None) -> JSON:
        await self.library.run(lambda: self._chat(chat_id))
        await self.library.set_enabled(chat_id, enabled)
        if enabled:
            await self.engine.activate(chat_id)
        else:
            await self.engine.plan_now(chat_id)
        return await self.overview(chat_id)

    async def visible_messages(self, chat_id: str) -> list[MessageRecord]:
        def work() -> list[MessageRecord]:
            self._chat(chat_id)
            return [r for r in self.library.store.messages(chat_id) if not r.message.hidden]

        return await self.library.run(work)

    async def backfill(self, chat_id: str) -> JSON:
        await self.library.run(lambda: self._chat(chat_id))
        queued = await self.engine.activate(chat_id, backfill=True)
        waiting = not self.engine.llm.can_call(chat_id)
        return {"chat": chat_id, "queued": queued, "waiting_for_model": waiting}

    # -- scenes ------------------------------------------------------------------------------

    async def scenes(self, chat_id: str) -> list[JSON]:
        def work() -> list[JSON]:
            self._chat(chat_id)
            out: list[JSON] = []
            first = 0
            for scene in self.memory.breaks(chat_id):
                current = self.memory.current_scene_recap(scene)
                out.append(
                    {
                        "index": scene.position,
                        "first": first,
                        "name": scene.name,
                        "visible": scene.visible,
                        "source": scene.source,
                        "rationale": scene.rationale,
                        "current_version": scene.current,
                        "versions": len(self.memory.scene_recaps(scene.uid)),
                        "recap": current.recap if current else None,
                    }
                )
                if scene.visible:
                    first = scene.position + 1
            return out

        return await self.library.run(work)

    async def scene(self, chat_id: str, index: int) -> JSON:
        def work() -> JSON:
            scene = self._scene(chat_id, index)
            versions = self.memory.scene_recaps(scene.uid)
            return {
                "index": scene.position,
                "name": scene.name,
                "visible": scene.visible,
                "source": scene.source,
                "rationale": scene.rationale,
                "current_version": scene.current,
                "versions": [v.public(scene.current) for v in versions],
            }

        return await self.library.run(work)

    async def set_break(self, chat_id: str, index: int, visible: bool = True) -> JSON:
        def work() -> None:
            uid = self._uid(chat_id, index)
            if self.memory.scene_break(uid) is None:
                self.memory.set_break(chat_id, uid, "manual", self.engine.clock())
            self.memory.update_break(uid, visible=int(visible))

        await self._then_plan(chat_id, work, since=index)
        return await self.scene(chat_id, index)

    async def remove_break(self, chat_id: str, index: int) -> JSON:
        def work() -> None:
            scene = self._scene(chat_id, index)
            self.memory.remove_break(scene.uid)
            # The scene merges with the next one: detection looks at it again.
            self.memory.set_state(chat_id, checked_uid=None)

        await self._then_plan(chat_id, work, since=index)
        return {"removed": index}

    async def update_scene(
        self, chat_id: str, index: int, *, name: str | None, current_version: int | None
    ) -> JSON:
        def work() -> None:
            scene = self._scene(chat_id, index)
            if name is not None:
                self.memory.update_break(scene.uid, name=name.strip(), name_edited=1)
            if current_version is not None:
                known = {v.version for v in self.memory.scene_recaps(scene.uid)}
                if current_version not in known:
                    raise NotFound(f"scene {index} has no recap version {current_version}")
                self.memory.update_break(scene.uid, current=current_version)
                self.engine.drop_running_from(chat_id, scene.position)

        await self._then_plan(chat_id, work)
        return await self.scene(chat_id, index)

    async def edit_scene_recap(
        self, chat_id: str, index: int, recap: str, scene_name: str | None
    ) -> JSON:
        def work() -> None:
            scene = self._scene(chat_id, index)
            self.memory.add_scene_recap(
                chat_id, scene.uid, recap.strip(), self.engine.clock(),
                scene_name=scene_name, source="edit",
            )  # fmt: skip
            self.engine.drop_running_from(chat_id, scene.position)

        await self._then_plan(chat_id, work)
        return await self.scene(chat_id, index)

    async def regenerate_scene(self, chat_id: str, index: int) -> JSON:
        def work() -> int:
            scene = self._scene(chat_id, index)
            return self._enqueue(
                chat_id,
                "scene_recap",
                f"scene_recap:{chat_id}:{scene.uid}",
                {"break": scene.uid},
            )

        return {"job": await self.library.run(work)}

    # -- running recap ----------------------------------------------------------------------

    async def running(self, chat_id: str) -> list[JSON]:
        def work() -> list[JSON]:
            self._chat(chat_id)
            current = self.memory.current_running(chat_id)
            return [
                _running_json(self.memory, v, current) for v in self.memory.running_recaps(chat_id)
            ]

        return await self.library.run(work)

    async def edit_running(self, chat_id: str, content: str) -> JSON:
        def work() -> int:
            self._chat(chat_id)
            current = self.memory.current_running(chat_id)
            if current is None:
                raise Conflict("there is no running recap to edit yet")
            return int(
                self.memory.add_running(
                    chat_id, content.strip(), self.engine.clock(),
                    scene_count=current.scene_count, prev_scene_uid=current.prev_scene_uid,
                    new_scene_uid=current.new_scene_uid, source="edit",
                )
            )  # fmt: skip

        version = await self._then_plan(chat_id, work)
        return {"version": version}

    async def select_running(self, chat_id: str, version: int) -> JSON:
        def work() -> None:
            self._chat(chat_id)
            if version not in {v.version for v in self.memory.running_recaps(chat_id)}:
                raise NotFound(f"no running recap version {version} in {chat_id!r}")
            self.memory.set_state(chat_id, current_recap=version)

        await self._then_plan(chat_id, work)
        return {"current_version": version}

    async def regenerate_running(self, chat_id: str) -> JSON:
        def work() -> int:
            self._chat(chat_id)
            current = self.memory.current_running(chat_id)
            if current is None or current.new_scene_uid is None:
                raise Conflict("there is no running recap to regenerate yet")
            return self._enqueue(
                chat_id,
                "running_recap",
                f"running_recap:{chat_id}:{current.new_scene_uid}:again",
                {"scene": current.new_scene_uid, "again": True},
            )

        return {"job": await self.library.run(work)}

    # -- message recaps ------------------------------------------------------------------------

    async def message_recaps(self, chat_id: str) -> list[JSON]:
        def work() -> list[JSON]:
            self._chat(chat_id)
            recaps = self.memory.message_recaps(chat_id)
            excluded = self.memory.excluded(chat_id)
            view = self.engine.views.get(chat_id)
            injected = {c.position for c in view.recaps} if view else set()
            out = []
            for record in self.memory.messages_from(chat_id):
                done = recaps.get((record.uid, swipe_of(record)))
                if done is None and record.uid not in excluded:
                    continue
                fresh = done is not None and done.source_hash == text_hash(record.message.mes)
                out.append(
                    {
                        "index": record.position,
                        "swipe": swipe_of(record),
                        "recap": done.recap if done else None,
                        "edited": bool(done and done.edited),
                        "stale": bool(done and not fresh),
                        "excluded": record.uid in excluded,
                        "can_be_injected": record.position in injected,
                    }
                )
            return out

        return await self.library.run(work)

    async def edit_message_recap(self, chat_id: str, index: int, recap: str) -> JSON:
        def work() -> None:
            uid = self._uid(chat_id, index)
            record = self.memory.messages_by_uid([uid])[uid]
            self.memory.put_message_recap(
                chat_id, uid, swipe_of(record), text_hash(record.message.mes), recap.strip(),
                self.engine.clock(), edited=True,
            )  # fmt: skip

        await self._then_plan(chat_id, work)
        return {"index": index, "recap": recap.strip(), "edited": True}

    async def exclude_message(self, chat_id: str, index: int, excluded: bool) -> JSON:
        def work() -> None:
            self.memory.set_excluded(chat_id, self._uid(chat_id, index), excluded)

        await self._then_plan(chat_id, work)
        return {"index": index, "excluded": excluded}

    async def regenerate_message(self, chat_id: str, index: int) -> JSON:
        def work() -> int:
            uid = self._uid(chat_id, index)
            record = self.memory.messages_by_uid([uid])[uid]
            item = [uid, swipe_of(record), text_hash(record.message.mes)]
            return self._enqueue(
                chat_id, "message_recap", f"message_recap:{chat_id}:{uid}:again", {"items": [item]}
            )

        return {"job": await self.library.run(work)}

    def _enqueue(self, chat_id: str, operation: str, key: str, payload: JSON) -> int:
        job_id, _ = self.engine.stamp(chat_id, operation, key, payload)
        if job_id is None:
            raise Conflict(f"nothing to {operation.replace('_', ' ')} there")
        # Asked for by the user: a job that failed on this same input runs again.
        self.library.store.jobs.retry(job_id, self.engine.clock())
        self.engine.queue.wake()
        return int(job_id)


def _running_json(memory: Any, version: Any, current: Any) -> JSON:
    return {
        "version": version.version,
        "created": version.created,
        "content": version.content,
        "scene_count": version.scene_count,
        "prev_scene_index": memory.position_of(version.prev_scene_uid),
        "new_scene_index": memory.position_of(version.new_scene_uid),
        "source": version.source,
        "current": current is not None and version.version == current.version,
    }
