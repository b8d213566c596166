"""One running proxy per store: the second would run the same queue and double every call.

`serve` holds an exclusive `flock` on `<store>.lock` while its memory engine runs, and
writes who holds it (pid, address) into the file. The lock belongs to the open file, so
it ends with the process however it ends: a crash leaves no stale lock behind. `chats`
and `identify` take no lock: they find the serving proxy here (`serving`) and ask it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from types import TracebackType

from proxy.core.guard import reachable
from proxy.errors import StoreBusy

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # Windows: no flock; the proxy runs without the guard, and says so
    fcntl = None  # type: ignore[assignment]


def serving(store_path: Path | str) -> tuple[str, int] | None:
    """Where the proxy that serves the store listens, `(host, port)`, if one runs: the
    holder its lock file names, when that process is alive (the file outlives it)."""
    try:
        holder = json.loads(Path(f"{store_path}.lock").read_bytes())
        pid, (host, port) = int(holder["pid"]), holder["listening"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, or written by a proxy before `listening` was
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return str(host), int(port)


class StoreLock:
    """Held for the life of a serving proxy; a context manager."""

    def __init__(self, store_path: Path | str, listening: tuple[str, int]) -> None:
        self.path = Path(f"{store_path}.lock")
        self.listening = listening  # (host, port): where `chats` and `identify` ask it
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        if fcntl is None:
            log.warning("no file locks on this system: run one recap-proxy per store")
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(os.read(fd, 4096))
            os.close(fd)
            raise StoreBusy(
                f"another recap-proxy ({holder}) already serves the store "
                f"{str(self.path).removesuffix('.lock')}; stop it first, or give this one its "
                "own [store] path"
            ) from None
        os.ftruncate(fd, 0)
        record = {"pid": os.getpid(), "listening": self.listening, "since": time.time()}
        os.write(fd, json.dumps(record).encode())
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no longer serving: `serving` finds nobody
            os.close(self._fd)  # releases the lock
            self._fd = None


def _describe(raw: bytes) -> str:
    """The holder a lock file names, for a second proxy's error."""
    try:
        holder = json.loads(raw)
        pid, (host, port) = int(holder["pid"]), holder["listening"]
    except (ValueError, KeyError, TypeError):
        return "its details unreadable"
    return f"pid {pid}, serving {reachable(str(host), int(port))}"
