"""`recap-proxy eval` against a model that answers well, and against one that copies the
prompt back: the report says what the memory keeps, and why it keeps nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from proxy.cli.eval import run_eval
from proxy.cli.main import build_parser
from proxy.errors import ConfigError
from tests.conftest import FakeLLM


def eval_args(fake_llm: FakeLLM, *extra: str) -> argparse.Namespace:
    argv = ["eval", "--upstream", fake_llm.base_url, "--model", "fake-model", *extra]
    return build_parser().parse_args(argv)


async def test_a_model_that_answers_well_recalls_every_fact(
    fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await run_eval(eval_args(fake_llm, "--messages", "120", "--scenes", "4", "--json"))
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 0 and "job(s) done" in err
    assert report["recall"] == 1.0 and len(report["facts"]) == 3
    assert (report["breaks_found"], report["breaks_true"]) == (3, 3)
    assert report["failed"] == 0 and report["calls"]["scene_recap"]["calls"] == 3
    assert report["stored"]["scene_recaps"] == 3 and report["left_out_max"] > 0
    for key in ("prompt_tokens", "completion_tokens", "seconds", "per_1000_messages"):
        assert report[key]
    # Every call went to the model given, with the model given.
    bodies = [json.loads(s.body) for s in fake_llm.state.seen if s.path != "/v1/models"]
    assert bodies and all(b["model"] == "fake-model" for b in bodies)


async def test_a_model_that_copies_the_prompt_back_is_said_plainly(
    fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake_llm.state.faults = {"detect_scene_break": ["echo"] * 200}
    config = tmp_path / "config.toml"
    config.write_text("[queue]\nmax_attempts = 2\n", encoding="utf-8")
    args = eval_args(fake_llm, "--messages", "60", "--scenes", "2", "--config", str(config))
    code = await run_eval(args)
    out, _ = capsys.readouterr()
    assert code == 1
    assert "recall: 0 of 1 facts" in out and "scene breaks: 0 of 1 found" in out
    assert "copies the prompt back" in out and "bigger model" in out
    # Nothing was kept, so nothing of the chat was left out.
    assert "0 scene recaps, 0 running recap versions" in out
    assert "left out at most 0 chat messages" in out


async def test_eval_needs_a_model(fake_llm: FakeLLM) -> None:
    args = build_parser().parse_args(["eval", "--upstream", fake_llm.base_url])
    with pytest.raises(ConfigError, match="--model"):
        await run_eval(args)
