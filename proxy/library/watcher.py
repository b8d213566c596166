"""Following ST's data folder: a pure path filter and a thin watchfiles loop.

ST saves a chat by writing `<file>.jsonl.<digits>` and renaming it over the chat, and
keeps backups in `<user>/backups/`; neither is a chat. The loop batches what changed over
a short debounce and hands the chat files (and group files, which name group chats) to
the library, which re-reads only what really changed.

watchfiles' blocking `watch` runs in a thread of its own, which hands only non-empty
batches (and the first, empty one that says the OS watch is in place) to the event loop.
Its `awatch` would go through a worker thread and back for every wait that ends empty,
ten times a second: about 10 ms of CPU a second for an idle proxy, and a wake-up of the
event loop that serves the chat requests each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from watchfiles import Change, watch

from proxy.library.chats import ChatLibrary
from proxy.sillytavern.layout import CHATS, GROUP_CHATS, locate
from proxy.store import log_failed
from proxy.waits import SERVING

log = logging.getLogger(__name__)

# How often the watch thread looks for a stop, in ms; a batch is handed on once no change
# came for this long (or after the debounce). The OS's events are queued meanwhile.
STEP_MS = 50
# How long one wait for changes lasts, in ms: the first that ends empty says that the OS
# watch is in place (`Watcher.ready`).
WAIT_MS = 100

Batch = set[tuple[Change, str]]


def is_relevant(rel: str) -> bool:
    """True for chat files and group files, by their path relative to the data folder."""
    if locate(rel) is not None:
        return True
    parts = PurePosixPath(rel).parts
    return (len(parts) == 3 and parts[1] == "groups" and parts[2].endswith(".json")) or is_lore(rel)


def is_lore(rel: str) -> bool:
    """Lorebooks, character cards and ST's settings: what says which lore a chat has."""
    parts = PurePosixPath(rel).parts
    if not parts or parts[0].startswith(("_", ".")):
        return False
    if len(parts) == 2:
        return parts[1] == "settings.json"
    if len(parts) != 3:
        return False
    return (parts[1] == "worlds" and parts[2].endswith(".json")) or (
        parts[1] == "characters" and parts[2].endswith((".png", ".json"))
    )


def may_hold_chats(rel: str) -> bool:
    """True for folders that hold chats: a user, `chats`, a character's, `group chats`."""
    parts = PurePosixPath(rel).parts
    if not parts or parts[0].startswith(("_", ".")):
        return False
    return (
        len(parts) == 1
        or (len(parts) == 2 and parts[1] in (CHATS, GROUP_CHATS))
        or (len(parts) == 3 and parts[1] == CHATS)
    )


def denied_paths(exc: PermissionError) -> list[Path]:
    """The paths a watch was refused for: watchfiles says `... about ["/a", "/b"]`."""
    if exc.filename:
        return [Path(exc.filename)]
    found = re.search(r"about (\[.*\])", str(exc))
    try:
        names = json.loads(found.group(1)) if found else []
    except ValueError:
        return []
    return [Path(n) for n in names if isinstance(n, str)]


def watch_roots(root: Path, excluded: set[Path]) -> list[Path]:
    """Paths to watch recursively that cover `root` and none of `excluded` (watching is
    recursive for every path given, so a folder holding an excluded one is split into
    its children)."""
    if root in excluded:
        return []
    if not any(path.is_relative_to(root) for path in excluded):
        return [root]
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    roots: list[Path] = []
    for child in children:
        try:
            folder = child.is_dir()
        except OSError:
            continue
        roots.extend(watch_roots(child, excluded) if folder else [child])
    return roots


class Watcher:
    """Watches the data folder while the server runs (an async context manager)."""

    def __init__(
        self,
        library: ChatLibrary,
        *,
        debounce_ms: int = 100,
        force_polling: bool = False,
        gone_poll: float = SERVING.gone_poll,
    ) -> None:
        """`gone_poll`: how often, in seconds, a data folder that is not there is looked for."""
        self.library = library
        self.gone_poll = gone_poll
        self.debounce_ms = debounce_ms
        self.force_polling = force_polling
        self.on_files: list[Callable[[list[Path]], None]] = []  # told of every changed path
        # Told `state` when the data folder goes or comes back (`/health` changes with it).
        self.on_state: list[Callable[[str], None]] = []
        self._stop = threading.Event()  # set from the loop, read by the watch thread
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self.ready = asyncio.Event()
        # Folders the OS would not let us watch (or read): left out, said once.
        self.excluded: set[Path] = set()
        # The data folder went away: looked for until it is back, then read again whole
        # once watched anew (`_follow`, which runs only while the folder is there).
        self._gone = False

    @property
    def gone(self) -> bool:
        return self._gone

    @gone.setter
    def gone(self, gone: bool) -> None:
        if gone == self._gone:
            return
        self._gone = gone
        for callback in self.on_state:
            try:
                callback("missing" if gone else "running")
            except Exception:
                log.exception("a watcher state listener failed")

    @property
    def state(self) -> str:
        """`running`, `off` (never started: no data folder, or watching turned off),
        `missing` (the data folder went away: it is looked for until it comes back) or
        `stopped` (it ended while the proxy runs: changes are no longer seen)."""
        if self._task is None:
            return "off"
        if self._task.done():
            return "stopped"
        return "missing" if self.gone else "running"

    async def __aenter__(self) -> Watcher:
        data_dir = self.library.data_dir
        if data_dir is not None:
            # Not there yet (ST not started once, a drive not mounted): read whole once it
            # is, as a folder that went and came back is; `gone` says so meanwhile.
            self.gone = not await asyncio.to_thread(data_dir.is_dir)
            self._task = asyncio.create_task(self._run(), name="st-data-watcher")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        thread = self._thread
        if thread is not None:
            # It sees the stop within a step; nothing of it outlives the app.
            await asyncio.to_thread(thread.join, 5)

    async def _run(self) -> None:
        data_dir = self.library.data_dir
        assert data_dir is not None
        root = data_dir.resolve()

        def keep(change: Change, path: str) -> bool:
            try:
                rel = Path(path).resolve().relative_to(root).as_posix()
            except ValueError:
                return False
            if change == Change.added and may_hold_chats(rel) and Path(path).is_dir():
                # Files written into a folder before the OS watch on it is in place raise
                # no event of their own (a new character's first chat): look inside.
                return True
            return is_relevant(rel)

        while not self._stop.is_set():
            try:
                if not await asyncio.to_thread(root.is_dir):
                    await self._await_return(root)
                    continue
                await self._follow(watch_roots(root, self.excluded), keep, root)
            except asyncio.CancelledError:
                raise
            except PermissionError as exc:
                denied = set(denied_paths(exc)) - self.excluded
                if not denied or root in denied:
                    log.error("cannot watch %s (%s); retrying in 2 s", data_dir, exc)
                    await asyncio.sleep(2)
                    continue
                for path in sorted(denied):
                    log.warning(
                        "cannot watch %s (permission denied): it is left out, the rest of "
                        "the data folder is watched",
                        path,
                    )
                self.excluded |= denied
            except Exception:
                log.exception("watching %s failed; retrying in 2 s", data_dir)
                await asyncio.sleep(2)

    async def _await_return(self, root: Path) -> None:
        """The data folder went away (deleted, moved, a backup being restored over it): the
        OS watch went with it. Look for it until it is back; once it is watched anew, it
        is read again whole (its chats come back with their memory)."""
        self.gone = True
        if self.ready.is_set():  # never watched: not there yet, which start-up has said
            log.warning(
                "SillyTavern's data folder %s is gone; its chats are not followed until it "
                "comes back (looked for every %.0f s)",
                root,
                self.gone_poll,
            )
        # Polled: nothing tells of a folder coming back but a watch on its parent, which
        # may have gone too.
        while not await asyncio.to_thread(root.is_dir):  # noqa: ASYNC110
            await asyncio.sleep(self.gone_poll)
        # Still `gone`: `_follow` reads it again once the new watch is in place, so that a
        # file still being written back raises its event after the read, not before it.

    async def _reread(self, root: Path, first: bool) -> None:
        if first:
            log.info("SillyTavern's data folder %s is there now; reading it", root)
        else:
            log.info("SillyTavern's data folder %s is back; reading it again", root)
        try:
            count = await self.library.index_all()
            log.info("indexed %d SillyTavern chat(s) in %s", count, root)
        except Exception:
            log_failed(log, "reading %s again failed", root)
        finally:
            self.gone = False

    async def _follow(
        self, roots: list[Path], keep: Callable[[Change, str], bool], root: Path
    ) -> None:
        """One watch over `roots` in its own thread, its batches applied here in order,
        until it stops or `root` is no longer there; what it raised (a folder it may not
        watch) is raised here."""
        loop = asyncio.get_running_loop()
        batches: asyncio.Queue[Batch | BaseException | None] = asyncio.Queue()

        def hand_on(item: Batch | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(batches.put_nowait, item)

        def follow() -> None:
            ended: BaseException | None = None
            said_ready = False
            try:
                for changes in watch(
                    *roots,
                    watch_filter=keep,
                    debounce=self.debounce_ms,
                    step=STEP_MS,
                    stop_event=self._stop,
                    force_polling=self.force_polling or None,
                    yield_on_timeout=True,
                    rust_timeout=WAIT_MS,
                    raise_interrupt=False,
                ):
                    if changes or not said_ready:
                        said_ready = True
                        hand_on(changes)
                    if not root.is_dir():
                        # Its OS watch went with it, even if it comes back: `_run` waits
                        # for it and watches it anew.
                        break
            except BaseException as exc:  # handed to the loop, which decides
                ended = exc
            hand_on(ended)

        thread = self._thread = threading.Thread(target=follow, name="st-data-watch", daemon=True)
        thread.start()
        while True:
            item = await batches.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            first = not self.ready.is_set()
            self.ready.set()
            if self.gone:
                await self._reread(root, first)
            if item:
                await self._apply(item)

    async def _apply(self, changes: Batch) -> None:
        paths = sorted({Path(p) for _, p in changes})
        for callback in self.on_files:
            try:
                callback(paths)
            except Exception:
                log.exception("file change callback failed")
        try:
            results = await self.library.refresh_watched(paths)
        except Exception:
            log_failed(log, "indexing %d changed file(s) failed", len(paths))
            return
        for result in results:
            if result.events:
                summary = ", ".join(f"{e.kind} #{e.index}" for e in result.events[:6])
                log.debug("%s: %s", result.chat_id, summary)
