"""The proxy's pauses reach every owner that waits: a test (or a caller of `make_app`) sets
them once, and nothing waits by a constant of its own."""

from __future__ import annotations

from pathlib import Path

from proxy.chat.providers import ChatMemory
from proxy.runtime.runtime import build_runtime
from proxy.waits import Waits
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import Story


def test_every_wait_reaches_its_owner(tmp_path: Path, fake_llm: FakeLLM) -> None:
    data = tmp_path / "data"
    Story(data, set()).grow(2)
    waits = Waits(request_hold=1.5, first_request=2.5, freshness=3.5, gone_poll=4.5,
                  store_retry=5.5)  # fmt: skip
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "sillytavern.data_dir": str(data),
            "store.path": str(tmp_path / "store.sqlite3"),
        }
    )
    app = make_app(build_runtime(settings, waits=waits))
    engine = app[RUNTIME].memory_parts().engine
    assert engine.waits is waits
    assert engine.queue.store_retry == 5.5 and engine._retries.store_retry == 5.5
    assert app[RUNTIME].memory_parts().library.freshness_wait == 3.5
    assert app[RUNTIME].memory_parts().watcher.gone_poll == 4.5
    provider = app[RUNTIME].injector.provider
    assert isinstance(provider, ChatMemory) and provider.first_request == 2.5
