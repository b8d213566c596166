"""`recap-proxy inject` (the preview goes through the server's own code), and what every
command shares: its options, its garbage collector, how it stops."""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import time
from pathlib import Path

import pytest

from proxy.cli.main import GC_YOUNG, main, tune_gc
from tests.adapters.captures import generations
from tests.core.st_requests import st_body
from tests.memory.story import CHAT_ID, Story
from tests.test_serve_e2e import free_port, launch, serve_config, stop, wait_for_port

REQUEST = st_body("stream-04-05_send_03")  # 10 messages, history from index 4


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_bytes(REQUEST)
    return path


def run(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, str]:
    code = main(list(argv))
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def test_inject_in_chat(capsysbinary: pytest.CaptureFixture[bytes], request_file: Path) -> None:
    code, out, err = run(
        capsysbinary,
        "inject",
        "--position",
        "in_chat",
        "--depth",
        "2",
        "--role",
        "1",
        "--memory",
        "Arden survived a wolf attack.",
        str(request_file),
    )
    assert code == 0
    body = json.loads(out)
    inserted = body["messages"][8]
    assert inserted["role"] == "user"
    assert "Arden survived a wolf attack." in inserted["content"]
    assert inserted["content"].startswith("<ROLEPLAY_RECAP>")  # the bundled template
    assert len(body["messages"]) == 11
    assert "index 8" in err and "depth 2" in err


def test_inject_takes_a_text_prompt_and_a_claude_body(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    path = tmp_path / "request.json"
    path.write_bytes(generations("textgen-llamacpp/chatml_stream")["05_send_03"])
    memory = ("--position", "in_chat", "--depth", "2", "--memory", "Arden survived a wolf attack.")
    code, out, err = run(capsysbinary, "inject", *memory, str(path))
    assert code == 0 and "in_chat, depth 2" in err
    prompt = json.loads(out)["prompt"]
    # A system turn of the prompt's own template before the last two chat messages (ST's
    # depth), which the open reply's turn follows.
    turn = "<|im_start|>system\n<ROLEPLAY_RECAP>"
    assert prompt.count(turn) == 1
    after = prompt.split(turn)[1]
    assert after.count("<|im_start|>") == 3 and after.endswith("<|im_start|>assistant\nSeraphina:")
    path.write_bytes(generations("claude/stream")["05_send_03"])
    code, out, err = run(capsysbinary, "inject", *memory, str(path))
    assert code == 0
    turns = json.loads(out)["messages"]
    # Claude's turns alternate: the memory joins the user turn before its depth.
    assert len(turns) == 7 and turns[4]["role"] == "user"
    assert turns[4]["content"].startswith("My name is Arden. I remember a wolf attack")
    assert turns[4]["content"].endswith("\n\nArden survived a wolf attack.\n</ROLEPLAY_RECAP>")


def test_inject_reads_stdin_and_memory_file(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    memory = tmp_path / "recap.txt"
    memory.write_text("The glade is safe.", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(REQUEST)))
    code, out, _ = run(
        capsysbinary, "inject", "--position", "2", "--memory-file", str(memory), "--no-template"
    )
    assert code == 0
    assert json.loads(out)["messages"][0] == {"role": "system", "content": "The glade is safe."}


def test_inject_none_prints_the_request_unchanged(
    capsysbinary: pytest.CaptureFixture[bytes], request_file: Path
) -> None:
    code, out, err = run(
        capsysbinary, "inject", "--position", "none", "--memory", "x", str(request_file)
    )
    assert code == 0
    assert out == REQUEST
    assert "nothing inserted" in err


def test_inject_uses_the_config_template(
    capsysbinary: pytest.CaptureFixture[bytes], request_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[injection]\ntemplate = "[Recap: {{running_recap}}]"\nposition = 0\n')
    code, out, _ = run(
        capsysbinary, "inject", "--config", str(config), "--memory", "wolves", str(request_file)
    )
    assert code == 0
    assert json.loads(out)["messages"][1] == {"role": "system", "content": "[Recap: wolves]"}


def test_inject_rejects_bad_input_clearly(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, request_file: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    code, out, err = run(capsysbinary, "inject", "--memory", "x", str(bad))
    assert code == 2 and out == b"" and "not valid JSON" in err
    code, _, err = run(
        capsysbinary, "inject", "--position", "middle", "--memory", "x", str(request_file)
    )
    assert code == 2 and "injection.position" in err
    code, _, err = run(capsysbinary, "inject", "--memory", "x", str(tmp_path / "missing.json"))
    assert code == 1 and "cannot read" in err


def test_serve_refuses_a_reachable_address_without_an_access_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "server.access_key is not set" in err and "RECAP_PROXY_SERVER__ACCESS_KEY" in err


def test_a_server_collects_young_objects_less_often() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG, 10, 10) and GC_YOUNG > 700
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["memory", "Ava", "--st-data", "x"], "memory: error: unrecognized arguments: --st-data x"),
        (
            ["service", "install", "--bogus"],
            "service install: error: unrecognized arguments: --bogus",
        ),
        (["identify", "a.json", "b.json"], "identify: error: unrecognized arguments: b.json"),
    ],
)
def test_an_option_a_command_does_not_take_is_named_with_its_usage(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"recap-proxy {said}" in err
    assert f"usage: recap-proxy {argv[0]}" in err  # the command's usage, not the top level's


def test_a_command_stopped_by_sigterm_cleans_up_as_after_ctrl_c(tmp_path: Path) -> None:
    # A backfill stopped by a service manager (or `timeout`) used to die mid-line, its
    # progress bar left without a newline and nothing said.
    data = tmp_path / "st" / "data"
    Story(data, {12}).grow(80)  # enough for a scene-break check
    port = free_port()
    config = serve_config(tmp_path, port)
    server = launch(tmp_path, "proxy", "serve", "--config", str(config), "--st-data", str(data))
    try:
        wait_for_port(port, server)
        # No request and no [memory.llm] model: its jobs wait, and so does the backfill.
        backfill = launch(tmp_path, "proxy", "backfill", "--config", str(config), CHAT_ID)
        assert backfill.stderr is not None
        said = b""
        deadline = time.monotonic() + 30
        while b"waiting for a model" not in said and time.monotonic() < deadline:
            if select.select([backfill.stderr], [], [], 0.1)[0]:
                said += os.read(backfill.stderr.fileno(), 4096)
        assert b"waiting for a model" in said, said
        backfill.send_signal(signal.SIGTERM)
        _, rest = backfill.communicate(timeout=10)
    finally:
        stop(server)
    text = (said + rest).decode()
    assert backfill.returncode == 143, text
    assert "\nstopped watching; the jobs go on in the server" in text
    assert "Traceback" not in text
