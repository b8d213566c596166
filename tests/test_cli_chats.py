"""`recap-proxy chats` and `recap-proxy identify` against a data folder, no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from tests.st_data import CAPTURE, GROUP_ID, SOLO_ID, final_state


@pytest.fixture
def st_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    final_state(data / "default-user")
    return data


def test_chats_table_and_json(st_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chats", "--st-data", str(st_data)]) == 0
    out = capsys.readouterr().out
    assert SOLO_ID in out and GROUP_ID in out and "MESSAGES" in out
    assert main(["chats", "--st-data", str(st_data), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["id"]: r["messages"] for r in rows} == {SOLO_ID: 16, GROUP_ID: 9}


def test_identify(st_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [json.loads(line) for line in (CAPTURE / "requests.jsonl").read_text().splitlines()]
    # Seraphina's turn after Orin's reply; the final file also holds her reply: a swipe.
    body = [r["body"] for r in records if r["step"] == "18_group_send_02"][-1]
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
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
