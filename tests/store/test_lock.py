"""One running proxy per store; a crashed one leaves nothing that blocks the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from proxy.errors import StoreBusy
from proxy.runtime.runtime import build_runtime
from proxy.store.lock import StoreLock, _describe, serving
from proxy.web import make_app
from tests.conftest import FakeLLM, make_settings


def test_a_second_holder_is_told_who_holds_the_store(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    busy = rf"pid {os.getpid()}, serving http://127.0.0.1:8765"
    with (
        StoreLock(store, ("127.0.0.1", 8765)),
        pytest.raises(StoreBusy, match=busy),
        StoreLock(store, ("127.0.0.1", 9999)),
    ):
        pass
    with StoreLock(store, ("127.0.0.1", 9999)):  # released with its holder
        pass
    # Said from where the holder listens (an IPv6 host in brackets), or not at all.
    assert (
        _describe(b'{"pid": 7, "listening": ["::1", 8765]}') == "pid 7, serving http://[::1]:8765"
    )
    assert _describe(b'{"pid": 7, "serving": "x"}') == "its details unreadable"


def test_a_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    Path(f"{store}.lock").write_text('{"pid": 999999, "serving": "http://gone", "since": 0}')
    with StoreLock(store, ("127.0.0.1", 8765)) as lock:
        assert json.loads(lock.path.read_text())["listening"] == ["127.0.0.1", 8765]


def test_the_holder_says_where_it_listens_while_it_lives(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    assert serving(store) is None  # no lock file
    with StoreLock(store, ("0.0.0.0", 8765)):
        assert serving(store) == ("0.0.0.0", 8765)
    assert serving(store) is None  # released
    # A crashed holder's file names a process that is gone.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, check=True)  # fmt: skip
    Path(f"{store}.lock").write_text(
        json.dumps({"pid": int(gone.stdout), "listening": ["127.0.0.1", 8765]})
    )
    assert serving(store) is None
    # One written before it said where it listens.
    Path(f"{store}.lock").write_text(json.dumps({"pid": os.getpid(), "serving": "x"}))
    assert serving(store) is None


async def test_a_second_proxy_on_the_same_store_does_not_start(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    (tmp_path / "data" / "default-user" / "chats").mkdir(parents=True)
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "sillytavern.data_dir": str(tmp_path / "data"),
            "store.path": str(tmp_path / "store.sqlite3"),
        }
    )
    first = web.AppRunner(make_app(build_runtime(settings)))
    await first.setup()
    second = web.AppRunner(make_app(build_runtime(settings)))
    try:
        with pytest.raises(StoreBusy, match="another recap-proxy"):
            await second.setup()
    finally:
        await second.cleanup()
        await first.cleanup()
    again = web.AppRunner(make_app(build_runtime(settings)))  # the first has stopped: free again
    await again.setup()
    await again.cleanup()
