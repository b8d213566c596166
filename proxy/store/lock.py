"""One running proxy per store: the second would run the same queue and double every call.

`serve` holds an exclusive `flock` on `<store>.lock` while its memory engine runs, and
writes who holds it (pid, address) into the file. The lock belongs to the open file, so
it ends with the process however it ends: a crash leaves no stale lock behind. The CLI's
short reads (`chats`, `identify`) take no lock: SQLite's own locking serves them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from types import TracebackType

from proxy.errors import StoreBusy

log = logging.getLogger(__name__)

try:
    import fcntl
except ImportError:  # Windows: no flock; the proxy runs without the guard, and says so
    fcntl = None  # type: ignore[assignment]


class StoreLock:
    """Held for the life of a serving proxy; a context manager."""

    def __init__(self, store_path: Path | str, owner: str) -> None:
        self.path = Path(f"{store_path}.lock")
        self.owner = owner
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
        record = {"pid": os.getpid(), "serving": self.owner, "since": time.time()}
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
            os.close(self._fd)  # releases the lock
            self._fd = None


def _describe(raw: bytes) -> str:
    try:
        holder = json.loads(raw)
        return f"pid {holder['pid']}, serving {holder['serving']}"
    except (ValueError, KeyError, TypeError):
        return "its details unreadable"
