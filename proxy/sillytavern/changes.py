"""Which chat files a request need not stat: the OS's notifications of writes to them.

Before a request is identified, its chat's file is checked (`ChatLibrary._saved_since`):
ST saves the user's message just before it sends the request, and the index must have
it. That stat is one of the dearest steps of a small request on a busy server: a system
call, and the caches it leaves cold (15-25 us of a small request's added latency,
measured against the same server without it). On Linux, an inotify watch on each folder
that holds indexed chats tells the event loop of every write and rename there. The
kernel queues the event inside the write or rename itself, before ST even answers its own
save; the loop reads it before it starts the handler of a request that came after (both
are ready in the same poll at the latest, and a handler's first step is scheduled behind
the callbacks of that poll). So a chat whose file was found as indexed since, with no
event for it, needs no stat.

Notifications do not reach every file system (network shares, some container mounts),
and nothing says so. A chat is therefore checked again once `RECHECK` seconds have passed
since its last check, and a check that finds a change no event announced turns the feed
off for good: every request stats its chat again, as it always did.

The same notifications start the re-read of a chat the moment ST saves it (`EarlyReads`),
rather than when its request comes.

Three libc calls through ctypes, not a dependency: watchfiles (the proxy's watcher) keeps
its events in its own thread and hands them over in debounced batches, too late for this.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

log = logging.getLogger(__name__)

RECHECK: Final = 1.0  # seconds a chat's last check stands without an event

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
IN_ONLYDIR: Final = 0x1000000
# Whatever can change a chat file's bytes, its name, or the folder itself.
MASK: Final = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_GONE: Final = IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then name)


class _Inotify(ctypes.CDLL):
    inotify_init1: Callable[[int], int]
    inotify_add_watch: Callable[[int, bytes, int], int]


def _libc() -> _Inotify | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        init, add = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
    add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
    return libc  # type: ignore[return-value]  # the two functions typed above


class ChangeFeed:
    """An inotify instance on the running loop: `on_change(path)` for each file written,
    created, renamed or deleted in a watched folder; `on_lost()` when events may have
    been lost (the kernel's queue overflowed, a folder went away)."""

    def __init__(
        self,
        libc: _Inotify,
        fd: int,
        on_change: Callable[[str], None],
        on_lost: Callable[[], None],
    ) -> None:
        self._libc, self._fd = libc, fd
        self._on_change, self._on_lost = on_change, on_lost
        self.folders: dict[str, int] = {}  # folder -> its watch descriptor
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._read)

    @classmethod
    def open(
        cls, on_change: Callable[[str], None], on_lost: Callable[[], None]
    ) -> ChangeFeed | None:
        """A feed on the running loop, or None where the OS has no inotify for us."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.info("no OS change notifications (%s)", os.strerror(ctypes.get_errno()))
            return None
        return cls(libc, fd, on_change, on_lost)

    def watch(self, folder: str) -> bool:
        """Follow `folder`; False when it cannot be (the user's watch limit, gone)."""
        if folder in self.folders:
            return True
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), MASK)
        if wd < 0:
            return False
        self.folders[folder] = wd
        return True

    def close(self) -> None:
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.folders.clear()

    def drain(self) -> None:
        """Take the events queued now, without waiting for the loop to."""
        if self._fd >= 0:
            self._read()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("OS change notifications failed (%s); stopped", exc)
                self.close()
                self._on_lost()
                return
            self._events(data)

    def _events(self, data: bytes) -> None:
        at, size = 0, _EVENT.size
        while at + size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, at)
            name = data[at + size : at + size + length].rstrip(b"\0")
            at += size + length
            # Two names of one folder (a link) share a descriptor: events go to both.
            folders = [folder for folder, watched in self.folders.items() if watched == wd]
            if mask & _GONE:
                # The folder went (or the queue overflowed): what was checked is unsure.
                for folder in folders:
                    del self.folders[folder]
                self._on_lost()
            elif name:
                for folder in folders:
                    self._on_change(os.path.join(folder, os.fsdecode(name)))


class Freshness:
    """Which chats' files may have changed since a stat found them as indexed.

    Without a feed (not started, not Linux, turned off) every chat may have: the chat path
    stats its chat on every request. With one, a chat checked less than `recheck` seconds
    ago, in a watched folder, with no event since, is as it was."""

    def __init__(
        self, data_dir: str, clock: Callable[[], float] = time.monotonic, recheck: float = RECHECK
    ) -> None:
        self._prefix = data_dir.rstrip(os.sep) + os.sep
        self._clock, self._recheck = clock, recheck
        self.feed: ChangeFeed | None = None
        self._checked: dict[str, float] = {}  # chat id -> when a stat found it as indexed
        self._changed: set[str] = set()  # chat ids with an event since their last check
        self.on_write: Callable[[str], None] | None = None  # told each chat id written

    def start(self) -> bool:
        """Open the feed on the running loop; True when it is on."""
        if self.feed is None:
            self.feed = ChangeFeed.open(self._change, self._lost)
        return self.feed is not None

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None
        self._checked.clear()
        self._changed.clear()

    def follow(self, name: str) -> None:
        """`name`, a chat file now indexed: its folder is watched from now on."""
        if self.feed is not None:
            self.feed.watch(os.path.dirname(name))

    def unchanged(self, chat_id: str) -> bool:
        """Whether the chat's file is surely as its last check found it (no stat needed)."""
        checked = self._checked.get(chat_id)
        return (
            checked is not None
            and chat_id not in self._changed
            and self._clock() - checked < self._recheck
        )

    def watching(self) -> frozenset[str]:
        """The folders watched now (for `read`, after a read that starts now)."""
        return frozenset(self.feed.folders) if self.feed is not None else frozenset()

    def read(self, files: Iterable[tuple[str, str]], watched: frozenset[str]) -> None:
        """`files` (chat id, file) were just read into the index: each is as the index
        has it, if its folder was watched (`watching`) before the read began, so that a
        write after the read announced itself."""
        if self.feed is None:
            return
        now = self._clock()
        for chat_id, name in files:
            if chat_id not in self._changed and os.path.dirname(name) in watched:
                self._checked[chat_id] = now

    def reading(self, chat_id: str) -> None:
        """A read of the chat's file starts now: it takes in every write announced so far
        (a write after it announces itself again), so once it is in, the chat needs no
        stat (`read`). Until then it is not as indexed."""
        self._changed.discard(chat_id)
        self._checked.pop(chat_id, None)

    def checked(self, chat_id: str, name: str, same: bool) -> None:
        """What a stat of the chat's file `name` found (`same`: as the index has it)."""
        feed = self.feed
        if feed is None:
            return
        last = self._checked.pop(chat_id, None)
        if not same and last is not None and chat_id not in self._changed:
            # The write's event is queued by now (the kernel queues it inside the write),
            # but the loop may not have read it yet: read it before crying wolf.
            feed.drain()
        announced = chat_id in self._changed
        self._changed.discard(chat_id)
        if same:
            if os.path.dirname(name) in feed.folders:
                self._checked[chat_id] = self._clock()
        elif last is not None and not announced:
            log.warning(
                "%s changed without an OS notification (a network share or a container "
                "mount?): chat files are checked on every request from now on; set "
                "sillytavern.force_polling = true if the chats live on such a folder",
                name,
            )
            self.stop()

    def _change(self, path: str) -> None:
        if path.startswith(self._prefix) and path.endswith(".jsonl"):
            chat_id = path[len(self._prefix) : -len(".jsonl")]
            self._changed.add(chat_id)
            if self.on_write is not None:
                self.on_write(chat_id)

    def _lost(self) -> None:
        self._checked.clear()


class EarlyReads:
    """Re-reads of chat files, started the moment the OS says that ST wrote one.

    ST saves the user's message, then builds its prompt (world info, token counts: tens of
    milliseconds at the least) and only then sends the request. A re-read that starts at
    the save is done, or well on its way, when the request comes; one that the request
    starts makes it wait for all of it: 2 to 3 ms for a 300-message chat on the store's
    thread, longer behind the upkeep's own work there. One re-read per chat at a time; a
    save during it gets one more after it."""

    def __init__(self, read: Callable[[str], Awaitable[object]]) -> None:
        self._read = read
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    def written(self, chat_id: str) -> None:
        """The chat's file was written: read it (now, or after the read under way)."""
        if chat_id in self._running:
            self._again.add(chat_id)
            return
        self._running[chat_id] = asyncio.get_running_loop().create_task(
            self._reads(chat_id), name=f"re-read {chat_id}"
        )

    def under_way(self, chat_id: str) -> asyncio.Task[None] | None:
        """The chat's re-read if one runs now (a request waits for it, not a second)."""
        return self._running.get(chat_id)

    def all_under_way(self) -> list[asyncio.Task[None]]:
        """Every re-read running now."""
        return list(self._running.values())

    def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        self._again.clear()

    async def _reads(self, chat_id: str) -> None:
        try:
            while True:
                self._again.discard(chat_id)
                try:
                    await self._read(chat_id)
                except Exception:
                    # The request that follows reads it again itself (its stat differs).
                    log.exception("re-reading %s after ST saved it failed", chat_id)
                if chat_id not in self._again:
                    return
        finally:
            if self._running.get(chat_id) is asyncio.current_task():
                del self._running[chat_id]
