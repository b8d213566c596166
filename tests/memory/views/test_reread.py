"""A memory view carried over a re-read of its chat (`proxy.memory.views.reread.carried`): its
positions moved with the messages, or, built from another version, marked outdated."""

from __future__ import annotations

import dataclasses

from proxy.core.recall import SceneCard
from proxy.core.recaps import Candidate, RecapShelf
from proxy.identify.chat_index import ChatEntry
from proxy.library.mirror import Refreshed
from proxy.memory.views.reread import carried
from proxy.memory.views.view import MemoryView
from proxy.sillytavern.reconcile import Event
from proxy.web.keys import RUNTIME
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory

# The running recap covers 0-8 (a scene ending at 8); the recaps of 10, 12, 14, 16 and 20
# stand in for them; 18 lacks one, 22-23 were not looked at.
VIEW = MemoryView(
    running="They met at the mill.",
    covered_through=8,
    cutoff=8,
    shelf=RecapShelf.of([Candidate(p, 5 + p, f"#{p}") for p in (10, 12, 14, 16, 20)]),
    lacking=(18,),
    unscanned=range(22, 24),
    scenes={8: SceneCard(8, 8, "The mill", "They met.", 9)},
    file_hash=b"before",
)


def reread(*events: Event, total: int = 28, replaced: bytes = b"before") -> Refreshed:
    entry = ChatEntry("c", 1.0, total, [])
    return Refreshed("c", events, entry, None, True, replaced, b"after")


def test_a_deletion_moves_every_later_position_down() -> None:
    # The user deleted 5 (in the running recap's scene) and 12-13, edited 16 (now 13),
    # and a message was added at 20.
    carried_view = carried(
        VIEW,
        reread(
            Event("deleted", 5, 1),
            Event("deleted", 12, 2),
            Event("deleted", 13, 3),
            Event("edited", 13, 4),
            Event("added", 20),
            total=26,
        ),
    )
    assert (carried_view.covered_through, carried_view.cutoff) == (7, 7)
    shelf = carried_view.shelf
    # The deleted 12's recap is gone, the edited one's too (of its old text); the others'
    # costs went with them.
    assert shelf.positions == (9, 11, 17) and shelf.lines == ("- #10", "- #14", "- #20")
    assert shelf.newest(None, 1000) == ("Recent events, oldest first:\n- #10\n- #14\n- #20", 65)
    # 18 (now 15) still lacks its recap, and so do the edited 13 and the added 20.
    assert carried_view.lacking == (13, 15, 20)
    # 22-23, not looked at, are 19 and 21 now, with the added 20 between them.
    assert carried_view.unscanned == range(19, 22)
    assert carried_view.scenes[8].last == 7
    assert carried_view.file_hash == b"after" and not carried_view.outdated
    assert carried_view.running == VIEW.running and carried_view.covered is VIEW.covered


def test_a_deleted_scene_end_moves_to_the_message_before_it() -> None:
    carried_view = carried(VIEW, reread(Event("deleted", 8, 1), Event("deleted", 3, 2), total=26))
    assert (carried_view.cutoff, carried_view.scenes[8].last) == (6, 6)
    assert carried_view.shelf.positions == (8, 10, 12, 14, 18)


def test_only_the_newest_messages_changed_keeps_the_view() -> None:
    # ST saved the user's message, then the reply: nothing older moved.
    for result in (reread(Event("added", 28), total=29), reread(Event("swiped", 27, 9))):
        same = carried(VIEW, result)
        assert dataclasses.replace(same, file_hash=VIEW.file_hash) == VIEW
        # It holds for the file as it is now: a deletion read next moves it.
        assert same.file_hash == b"after" and not same.outdated
        deleted = Refreshed("c", (Event("deleted", 3, 1),), result.entry, None, True, b"after")
        assert carried(same, deleted).shelf.positions == (9, 11, 13, 15, 19)


def test_a_view_of_another_version_is_outdated() -> None:
    # Planning built it from the store after the re-read: it is right as it is.
    built_after = MemoryView(file_hash=b"after", shelf=VIEW.shelf)
    assert carried(built_after, reread(Event("deleted", 3, 1))) is built_after
    # Built from a version before the one re-read (or with no file): where its messages
    # went is not known; the history's stepped start waits for the next view.
    for view in (VIEW, MemoryView(shelf=VIEW.shelf)):
        older = carried(view, reread(Event("deleted", 3, 1), replaced=b"between"))
        assert older.outdated and older.shelf is view.shelf
    # Once outdated, it stays so until planning builds the next.
    outdated = carried(VIEW, reread(Event("deleted", 3, 1), replaced=b"between"))
    assert carried(outdated, reread(Event("deleted", 3, 1), replaced=b"before")).outdated


async def test_a_save_without_message_changes_keeps_the_engines_view_current(
    memory_proxy: MemoryFactory,
) -> None:
    """ST saves the chat's metadata alone (its Author's Note, a bookmark): the file's hash
    changes, no message does. The view follows it, so that a deletion read before the next
    view is moved with it."""
    memory = await memory_proxy(12, {8})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    engine = memory.engine
    built = engine.views[CHAT_ID]
    entry = memory.app[RUNTIME].memory_parts().library.index.entries[CHAT_ID]
    assert built.file_hash is not None
    saved = Refreshed(CHAT_ID, (), entry, saved=True, replaced=built.file_hash, file_hash=b"new")
    engine.on_refresh(saved)
    assert engine.views[CHAT_ID].file_hash == b"new"
    deleted = Refreshed(CHAT_ID, (Event("deleted", 3, 1),), entry, None, True, b"new", b"newer")
    engine.on_refresh(deleted)
    assert not engine.views[CHAT_ID].outdated


def test_a_covered_message_edited_outdates_the_view() -> None:
    """The running recap covers 0-8 and the user edited 4 (or a message was added at 6):
    the covered texts are of what was there, so nothing is left out by them until planning
    reads them again (hunted seed 4370: an edited message left out, taken for the old
    text as ST changed it on its way)."""
    edited = carried(VIEW, reread(Event("edited", 4, 1)))
    assert edited.outdated and edited.cutoff == 8 and 4 in edited.lacking
    added = carried(VIEW, reread(Event("added", 6), total=29))
    assert added.outdated and 6 in added.lacking
    # Past the cutoff an edit leaves the covered texts as they are.
    assert not carried(VIEW, reread(Event("edited", 12, 1))).outdated
