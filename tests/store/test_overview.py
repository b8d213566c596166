"""Every chat's memory at a glance, in grouped queries."""

from __future__ import annotations

from pathlib import Path

from proxy.core.operations import Operation
from proxy.memory.calls.jobs import JobSpec, write_job
from proxy.store.overview import chat_summaries
from tests.store.test_search import CHAT, story


def test_scenes_running_version_and_queue_per_chat(tmp_path: Path) -> None:
    db, uids = story(tmp_path / "s.sqlite3")
    idle = {"queued": 0, "running": 0, "failed": 0}
    summary = {"active": False, "scenes": 4, "running_version": None, "queue": idle}
    assert chat_summaries(db.db) == {CHAT: summary}
    db.memory.activate(CHAT)
    for version in (1, 2):
        db.memory.add_running(
            CHAT, f"v{version}", 0.0, scene_count=version,
            prev_scene_uid=None, new_scene_uid=uids[version], source="llm",
        )  # fmt: skip
    db.memory.update_break(uids[0], visible=0)
    spec = JobSpec(CHAT, Operation.SCENE_RECAP, "k", {}, "h", "api")
    write_job(db, spec, 0.0)
    queue = {"queued": 1, "running": 0, "failed": 0}
    expected = {"active": True, "scenes": 3, "running_version": 2, "queue": queue}
    assert chat_summaries(db.db)[CHAT] == expected
    db.memory.set_state(CHAT, current_recap=1)  # a version the user picked
    assert chat_summaries(db.db)[CHAT]["running_version"] == 1
    db.close()
