"""How the memory commands reach the running proxy: no server, its access key, and
which chat a typed name stands for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proxy.cli.main import build_parser
from proxy.cli.memory import run_memory_command
from proxy.cli.server import pick_chat, server_url
from proxy.errors import RecapProxyError
from tests.conftest import make_settings
from tests.memory_env import MemoryFactory, cli


async def test_no_server_says_how_to_start_one(unused_tcp_port: int) -> None:
    args = build_parser().parse_args(["queue", "--server", f"http://127.0.0.1:{unused_tcp_port}"])
    with pytest.raises(RecapProxyError, match="recap-proxy serve"):
        await run_memory_command(args)


def test_the_server_is_where_its_stores_lock_says_it_listens(tmp_path: Path) -> None:
    store = tmp_path / "store.sqlite3"
    settings = make_settings(**{"store.path": str(store), "server.port": 8999})
    args = build_parser().parse_args(["queue"])
    assert server_url(args, settings) == "http://127.0.0.1:8999"  # no proxy serves it
    # `serve --port 9100` holds the store: its lock file names where it listens.
    lock = Path(f"{store}.lock")
    lock.write_text(json.dumps({"pid": os.getpid(), "listening": ["127.0.0.1", 9100]}))
    assert server_url(args, settings) == "http://127.0.0.1:9100"
    given = build_parser().parse_args(["queue", "--server", "http://127.0.0.1:7000"])
    assert server_url(given, settings) == "http://127.0.0.1:7000"  # --server wins
    lock.write_text("")  # a stopped proxy empties it
    assert server_url(args, settings) == "http://127.0.0.1:8999"


CHATS = [
    {"id": "u/chats/default_Sera/Sera - 1", "file": "u/chats/default_Sera/Sera - 1.jsonl",
     "user": "u", "kind": "character", "name": "Sera", "owner": "default_Sera", "updated": 1.0},
    {"id": "u/chats/default_Sera/Sera - 2", "file": "u/chats/default_Sera/Sera - 2.jsonl",
     "user": "u", "kind": "character", "name": "Sera", "owner": "default_Sera", "updated": 2.0},
    {"id": "u/chats/Orin/Orin - 1", "file": "u/chats/Orin/Orin - 1.jsonl",
     "user": "u", "kind": "character", "name": "Orin", "owner": "Orin", "updated": 3.0},
    {"id": "u/chats/Orin2/Orin - 9", "file": "u/chats/Orin2/Orin - 9.jsonl",
     "user": "u", "kind": "character", "name": "Orin", "owner": "Orin2", "updated": 4.0},
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "chosen", "says"),
    [
        ("u/chats/default_Sera/Sera - 1", "u/chats/default_Sera/Sera - 1", False),
        ("u/chats/default_Sera/Sera - 1.jsonl", "u/chats/default_Sera/Sera - 1", False),
        ("Sera - 1.jsonl", "u/chats/default_Sera/Sera - 1", False),
        ("Sera - 1", "u/chats/default_Sera/Sera - 1", False),
        ("Sera", "u/chats/default_Sera/Sera - 2", True),  # the character's newest chat
        ("sera", "u/chats/default_Sera/Sera - 2", True),
    ],
)
def test_a_chat_is_named_by_id_file_or_character(name: str, chosen: str, says: bool) -> None:
    found, note = pick_chat(name, CHATS)
    assert found == chosen
    assert (note is not None) == says
    if note:
        assert chosen in note and "newest of its 2 chats" in note


def test_a_name_of_two_characters_lists_them() -> None:
    with pytest.raises(RecapProxyError, match="2 different characters") as caught:
        pick_chat("Orin", CHATS)
    assert "u/chats/Orin/Orin - 1" in str(caught.value)
    assert "u/chats/Orin2/Orin - 9" in str(caught.value)
    with pytest.raises(RecapProxyError, match="no chat named 'Nobody'"):
        pick_chat("Nobody", CHATS)


def test_part_of_a_chats_name_lists_the_chats_it_is_part_of() -> None:
    # A chat renamed in ST ("Orin - the long road") is named by its new file name whole;
    # a part of it is not a name, but the error says which chats it would fit.
    with pytest.raises(RecapProxyError) as caught:
        pick_chat("orin -", CHATS)
    said = str(caught.value)
    assert said.startswith("no chat named 'orin -'; its name is part of:")
    assert said.index("u/chats/Orin2/Orin - 9") < said.index(
        "u/chats/Orin/Orin - 1"
    )  # newest first
    assert "Sera" not in said


async def test_the_cli_sends_the_access_key_from_the_config(
    memory_proxy: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await memory_proxy(8, ends=set(), **{"server.access_key": "s3cret"})
    with pytest.raises(RecapProxyError, match="access key"):
        await cli(memory, "queue")
    monkeypatch.setenv("RECAP_PROXY_SERVER__ACCESS_KEY", "s3cret")
    assert await cli(memory, "queue", "pause") == 0
