"""Which ST data folder the server reads: the one configured, the one the store mirrors,
ST's own folder's data/; one not there yet is read once it is, with no restart. And
nothing the proxy writes may be set inside it."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import ConfigError
from proxy.runtime.data_folder import resolve_data_dir
from proxy.runtime.runtime import build_runtime
from proxy.store import Store
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.conftest import FakeLLM, make_settings
from tests.memory.story import Story
from tests.memory_env import QUICK
from tests.runtime.test_runtime import settings_for
from tests.waiting import until


@pytest.mark.parametrize(
    ("key", "where", "named"),
    [
        ("store.path", "recap.sqlite3", "store.path"),
        ("server.record_dir", "cassettes", "server.record_dir (--record)"),
    ],
)
def test_nothing_the_proxy_writes_may_be_set_inside_st_data(
    tmp_path: Path, fake_llm: FakeLLM, key: str, where: str, named: str
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    data = tmp_path / "data"
    before = sorted(data.rglob("*"))
    with pytest.raises(ConfigError, match=f"{re.escape(named)} = .* is inside SillyTavern's"):
        make_app(build_runtime(make_settings(**{**settings, key: str(data / where)})))
    assert sorted(data.rglob("*")) == before  # nothing was made there
    make_app(
        build_runtime(make_settings(**{**settings, key: str(tmp_path / where)}))
    )  # beside it: fine


def test_an_in_memory_store_is_no_file_in_st_data(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(tmp_path, fake_llm)
    monkeypatch.chdir(tmp_path / "data")  # where ":memory:" would resolve, were it a path
    make_app(build_runtime(make_settings(**{**settings, "store.path": ":memory:"})))


async def test_with_no_folder_given_the_one_the_store_mirrors_is_served(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    # `serve --st-data DIR` once, then `serve` alone: DIR again, not the usual places
    # (which, finding another folder, marked every chat of DIR deleted).
    settings = settings_for(tmp_path, fake_llm)
    async with Store(settings["store.path"]) as store:
        await store.call(lambda db: db.set_mirrored_folder(settings["sillytavern.data_dir"]))
    alone = {k: v for k, v in settings.items() if k != "sillytavern.data_dir"}
    with caplog.at_level(logging.INFO, logger="proxy.runtime.data_folder"):
        app = make_app(build_runtime(make_settings(**alone)))
    assert app[RUNTIME].memory_parts().library.data_dir == tmp_path / "data"
    assert f"using SillyTavern data folder {tmp_path / 'data'}, the one the store mirrors" in (
        caplog.text
    )


def absent(tmp_path: Path, fake_llm: FakeLLM, data: Path, **more: str) -> dict[str, str]:
    return {
        "upstream.base_url": fake_llm.base_url,
        "sillytavern.data_dir": str(data),
        "store.path": str(tmp_path / "store.sqlite3"),
        **more,
    }


async def test_a_data_folder_not_there_yet_is_read_once_it_is(
    tmp_path: Path,
    fake_llm: FakeLLM,
    aiohttp_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Started as a service before ST ever ran (ST makes data/ on its first start), or
    # before the drive it is on was mounted: the memory comes once it is there.
    data = tmp_path / "st" / "data"
    caplog.set_level(logging.INFO, logger="proxy")
    app = make_app(build_runtime(make_settings(**absent(tmp_path, fake_llm, data)), waits=QUICK))
    assert app[RUNTIME].memory_parts().library.data_dir == data
    assert (
        f"SillyTavern data folder {data} (sillytavern.data_dir, or --st-data) does not exist yet"
        in (caplog.text)
    )
    client = await aiohttp_client(app)
    health = await client.get("/health")
    said = await health.json()
    assert health.status == 503 and said["watcher"] == "missing", said
    assert said["problems"] == [
        "SillyTavern's data folder is missing (not there yet, or gone): its chats are not "
        "followed until it is there"
    ]
    story = Story(data, set())
    story.grow(4)
    library = app[RUNTIME].memory_parts().library
    await until(lambda: story.chat_id in library.index.entries, "the chat read")
    await until(
        lambda: app[RUNTIME].memory_parts().watcher.state == "running", "the folder watched"
    )
    assert (await client.get("/health")).status == 200
    story.grow(2)  # followed from then on
    await until(lambda: library.index.entries[story.chat_id].total == 6, "a save read")
    assert f"SillyTavern's data folder {data} is there now; reading it" in caplog.text
    assert "is gone" not in caplog.text  # it never was there


async def test_with_watching_off_a_data_folder_not_there_is_not_waited_for(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    app = make_app(
        build_runtime(
            make_settings(**absent(tmp_path, fake_llm, data, **{"sillytavern.watch": "false"}))
        )
    )
    assert app[RUNTIME].memory is None
    assert "with sillytavern.watch off it is not looked for; proxying without memory" in (
        caplog.text
    )


async def test_st_own_folder_given_its_data_folder_is_read_once_st_makes_it(
    tmp_path: Path, fake_llm: FakeLLM, aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh clone of ST, given as the folder: its data/ comes at ST's first start. Were
    # the clone watched as the data folder itself, data/default-user/ would be no user.
    install = tmp_path / "SillyTavern"
    (install / "public").mkdir(parents=True)
    (install / "server.js").write_text("// ST's server\n")
    app = make_app(build_runtime(make_settings(**absent(tmp_path, fake_llm, install)), waits=QUICK))
    assert app[RUNTIME].memory_parts().library.data_dir == install / "data"
    await aiohttp_client(app)
    story = Story(install / "data", set())
    story.grow(4)
    await until(
        lambda: story.chat_id in app[RUNTIME].memory_parts().library.index.entries, "the chat read"
    )


async def test_with_no_folder_given_the_one_the_store_mirrors_is_waited_for(
    tmp_path: Path,
    fake_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A service started before the drive with ST on it is mounted, none in the usual
    # places: the folder it served last, waited for, not none.
    monkeypatch.setattr("proxy.sillytavern.layout.find_data_dir", lambda *args: None)
    gone = tmp_path / "drive" / "SillyTavern" / "data"
    async with Store(tmp_path / "store.sqlite3") as store:
        await store.call(lambda db: db.set_mirrored_folder(str(gone)))
    settings = absent(tmp_path, fake_llm, gone)
    del settings["sillytavern.data_dir"]
    app = make_app(build_runtime(make_settings(**settings)))
    assert app[RUNTIME].memory_parts().library.data_dir == gone
    assert f"{gone} (the one this store mirrors) does not exist yet" in caplog.text


async def test_a_file_given_as_the_data_folder_is_said_and_not_waited_for(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    given = tmp_path / "data.jsonl"
    given.write_text("{}\n", encoding="utf-8")
    app = make_app(build_runtime(make_settings(**absent(tmp_path, fake_llm, given))))
    assert app[RUNTIME].memory is None
    assert f"{given} (sillytavern.data_dir, or --st-data) is a file, not SillyTavern's" in (
        caplog.text
    )


@pytest.mark.parametrize(("made", "level"), [("default-user", "INFO"), (None, "WARNING")])
def test_a_fresh_sts_folder_without_chats_is_no_warning(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture, made: str | None,
    level: str,
) -> None:  # fmt: skip
    """A fresh ST has made its data folder but no chats/ yet: said at info; a folder
    that holds nothing of ST's may be the wrong one: warned of."""
    data = tmp_path / "data"
    data.mkdir()
    if made:
        (data / made).mkdir()
    caplog.set_level(logging.INFO, logger="proxy")
    settings = make_settings(**{"upstream.base_url": fake_llm.base_url,
                                "sillytavern.data_dir": str(data),
                                "store.path": str(tmp_path / "s.sqlite3")})  # fmt: skip
    assert resolve_data_dir(settings) == data
    [said] = [
        r for r in caplog.records if "chats" in r.getMessage() and str(data) in r.getMessage()
    ]
    assert said.levelname == level
