"""`recap-proxy chats` and `recap-proxy identify` against a data folder, and while a
proxy serves the store."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

from proxy.cli import chats as cli_chats
from proxy.cli.main import main
from tests.adapters.captures import SOURCES, chats_before, generations
from tests.st_data import CAPTURE, GROUP_ID, SOLO_ID, final_state
from tests.test_serve_e2e import free_port, launch, serve_config, stop, wait_for_port


@pytest.fixture
def st_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    final_state(data / "default-user")
    return data


def group_turn(tmp_path: Path) -> Path:
    """A captured request, as a file: Seraphina's turn after Orin's reply in the group
    chat, whose final file also holds her reply (so: a swipe)."""
    records = [json.loads(line) for line in (CAPTURE / "requests.jsonl").read_text().splitlines()]
    path = tmp_path / "request.json"
    path.write_text(json.dumps([r["body"] for r in records if r["step"] == "18_group_send_02"][-1]))
    return path


def test_chats_table_and_json(st_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chats", "--st-data", str(st_data)]) == 0
    out = capsys.readouterr().out
    assert SOLO_ID in out and GROUP_ID in out and "MESSAGES" in out
    assert main(["chats", "--st-data", str(st_data), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["id"]: r["messages"] for r in rows} == {SOLO_ID: 16, GROUP_ID: 9}
    assert set(rows[0]) == set(cli_chats.SUMMARY)  # as a serving proxy's answer is cut


def test_identify(st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = group_turn(tmp_path)
    assert main(["identify", "--st-data", str(st_data), str(path)]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["chat"] == GROUP_ID and answer["generation"] == "swipe"
    assert main(["identify", "--st-data", str(st_data), "--chat-id", SOLO_ID, str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["chat"] == SOLO_ID


def test_missing_data_folder_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chats", "--st-data", str(tmp_path / "nope")]) == 1
    assert "no SillyTavern data folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "run",
    [
        "claude/stream",
        "claude/stream_sysprompt",
        "textgen-llamacpp/chatml_stream",
        "textgen-ollama/chatml_stream",
        "kobold-classic/chatml_stream",
        "textgen-generic/noinstruct_stream",
    ],
)
@pytest.mark.parametrize(
    ("step", "generation"),
    [("05_send_03", "normal"), ("06_swipe", "swipe"), ("07_continue", "continue")],
)
def test_identify_takes_every_format_st_sends(
    run: str, step: str, generation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A Claude body, or a text prompt split by its instruct template, as the chat path
    # reads them: before, anything but a chat completion was "no `messages` list".
    data = tmp_path / "data"
    [chat] = chats_before(SOURCES / run, step, data)
    path = tmp_path / "request.json"
    path.write_bytes(generations(run)[step])
    assert main(["identify", "--st-data", str(data), str(path)]) == 0
    answer = json.loads(capsys.readouterr().out)
    chat_id = str(chat.relative_to(data).with_suffix(""))
    assert (answer["chat"], answer["generation"]) == (chat_id, generation)


def test_identify_takes_apart_what_st_merged_for_claude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An Author's Note at depth 0, merged into the user's last turn: as the chat path, the
    # command finds the chat with the two taken apart.
    data = tmp_path / "data"
    [chat] = chats_before(SOURCES / "claude/stream", "05_send_03", data)
    body = json.loads(generations("claude/stream")["05_send_03"])
    body["messages"][-1]["content"] += "\n\n[Author's note: it rains.]"
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    assert main(["identify", "--st-data", str(data), str(path)]) == 0
    answer = json.loads(capsys.readouterr().out)
    chat_id = str(chat.relative_to(data).with_suffix(""))
    assert (answer["chat"], answer["generation"]) == (chat_id, "normal")


def test_identify_says_what_is_wrong_with_a_body(
    st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "request.json"
    path.write_text('{"model": "m"}')
    assert main(["identify", "--st-data", str(st_data), str(path)]) == 2
    assert "no `messages` list" in capsys.readouterr().err
    # Said before any data folder is looked at (none here).
    assert main(["identify", "--st-data", str(tmp_path / "nowhere"), str(path)]) == 2
    assert "no `messages` list" in capsys.readouterr().err


def test_the_install_folder_given_for_the_data_folder_is_understood(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install = tmp_path / "SillyTavern"
    final_state(install / "data" / "default-user")
    for given in (install, install / "data" / "default-user"):
        assert main(["chats", "--st-data", str(given), "--json"]) == 0
        assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {SOLO_ID, GROUP_ID}


def test_the_folder_the_store_mirrors_is_read_and_no_other(
    st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As after `serve --st-data DIR`: the store remembers DIR, and `chats` alone reads it.
    assert main(["chats", "--st-data", str(st_data), "--json"]) == 0
    capsys.readouterr()
    assert main(["chats", "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {SOLO_ID, GROUP_ID}

    # Another folder would have marked every chat of the served one deleted in the store
    # the server shares: it is refused, naming both, and the store is left as it was.
    other = tmp_path / "other"
    final_state(other / "default-user")
    assert main(["chats", "--st-data", str(other)]) == 1
    err = capsys.readouterr().err
    assert f"mirrors SillyTavern's data folder {st_data}, not {other}" in err
    assert f"recap-proxy serve --st-data {other}" in err
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi."}]}))
    assert main(["identify", "--st-data", str(other), str(request)]) == 1
    assert "mirrors SillyTavern's data folder" in capsys.readouterr().err
    assert main(["chats", "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {SOLO_ID, GROUP_ID}


def test_while_a_proxy_serves_the_store_they_ask_it(
    st_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Indexing beside the server made two writers of one mirror: a save the command read
    # first was never installed in the server's index (its hash already in the store).
    port = free_port()
    config = serve_config(tmp_path, port)
    proc = launch(tmp_path, "proxy", "serve", "--config", str(config), "--st-data", str(st_data))
    try:
        wait_for_port(port, proc)

        def indexes_itself(*_: object) -> None:
            raise AssertionError("indexed beside the server")

        monkeypatch.setattr(cli_chats, "ChatLibrary", indexes_itself)
        rows: list[dict[str, object]] = []
        for _ in range(100):  # the server indexes the folder once it listens
            assert main(["chats", "--config", str(config), "--json"]) == 0
            rows = json.loads(capsys.readouterr().out)
            if len(rows) == 2:
                break
            time.sleep(0.05)
        assert {r["id"]: r["messages"] for r in rows} == {SOLO_ID: 16, GROUP_ID: 9}
        assert set(rows[0]) == set(cli_chats.SUMMARY)

        request = group_turn(tmp_path)
        assert main(["identify", "--config", str(config), str(request)]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert (answer["chat"], answer["generation"]) == (GROUP_ID, "swipe")
        named = ["identify", "--config", str(config), "--chat-id", SOLO_ID, str(request)]
        assert main(named) == 0
        assert json.loads(capsys.readouterr().out)["chat"] == SOLO_ID

        other = tmp_path / "other"
        final_state(other / "default-user")
        assert main(["chats", "--config", str(config), "--st-data", str(other)]) == 1
        err = capsys.readouterr().err
        assert f"reads SillyTavern's data folder {st_data}, not {other}" in err
    finally:
        stop(proc)
    # Once it stopped, the command reads the folder itself again.
    monkeypatch.undo()
    assert main(["chats", "--config", str(config), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_a_serving_proxy_that_wants_its_key_says_so(
    st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    keyed = serve_config(tmp_path, port, "keyed.toml", 'access_key = "a-long-random-access-key"')
    keyless = serve_config(tmp_path, port, "keyless.toml")
    proc = launch(tmp_path, "proxy", "serve", "--config", str(keyed), "--st-data", str(st_data))
    try:
        wait_for_port(port, proc)
        # Not read beside it (as when nothing answers): its refusal is the answer.
        assert main(["chats", "--config", str(keyless)]) == 1
        assert "this proxy needs its access key" in capsys.readouterr().err
        assert main(["chats", "--config", str(keyed), "--json"]) == 0
        assert isinstance(json.loads(capsys.readouterr().out), list)
    finally:
        stop(proc)


def test_a_proxy_still_starting_is_waited_for(
    st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `serve` takes the store's lock before its port opens: a command in between read the
    # folder beside it. Here a stand-in proxy opens its port 0.3 s after the lock says it
    # serves; its one chat is not in the folder.
    port = free_port()
    store = tmp_path / "s.sqlite3"
    config = serve_config(tmp_path, port)
    Path(f"{store}.lock").write_text(
        json.dumps({"pid": os.getpid(), "listening": ["127.0.0.1", port]}), encoding="utf-8"
    )
    row = dict.fromkeys(cli_chats.SUMMARY, "x") | {"id": "only/on/the/server", "messages": 1}

    async def root(_: web.Request) -> web.Response:
        return web.json_response({"service": "recap-proxy", "st_data": str(st_data)})

    async def chats(_: web.Request) -> web.Response:
        return web.json_response([row])

    def stand_in() -> None:
        async def run() -> None:
            await asyncio.sleep(0.3)
            app = web.Application()
            app.router.add_get("/", root)
            app.router.add_get("/recap/api/chats", chats)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            while not done.is_set():
                await asyncio.sleep(0.05)
            await runner.cleanup()

        asyncio.run(run())

    done = threading.Event()
    thread = threading.Thread(target=stand_in)
    thread.start()
    try:
        assert main(["chats", "--config", str(config), "--json"]) == 0
    finally:
        done.set()
        thread.join()
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["only/on/the/server"]
