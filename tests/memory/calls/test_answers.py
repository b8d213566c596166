"""Answers read from each wire format, with what the call cost when the API says
(the reading of whole, streamed and broken answers is in test_llm.py, against the fake)."""

from __future__ import annotations

import json

import pytest

from proxy.errors import JobFailure
from proxy.memory.calls.answers import read_answer, read_anthropic
from tests.fakes.fake_llm import anthropic_message, completion


def test_the_apis_own_token_figures_are_kept() -> None:
    body = {**completion("ok", model="m"), "usage": {"prompt_tokens": 120, "completion_tokens": 7}}
    answer = read_answer(json.dumps(body).encode(), "m", "scene_recap")
    assert (answer.text, answer.prompt_tokens, answer.answer_tokens) == ("ok", 120, 7)
    usage = {"input_tokens": 90, "output_tokens": 4}
    claude = {**anthropic_message("ok", model="c"), "usage": usage}
    answer = read_anthropic(json.dumps(claude).encode(), "c", "scene_recap")
    assert (answer.prompt_tokens, answer.answer_tokens) == (90, 4)


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": -1}, {"prompt_tokens": True}])
def test_missing_or_odd_figures_are_left_to_count(usage: object) -> None:
    body = {**completion("ok", model="m"), "usage": usage}
    answer = read_answer(json.dumps(body).encode(), "m", "scene_recap")
    assert answer.prompt_tokens is None and answer.answer_tokens is None


def test_something_else_is_a_job_failure() -> None:
    with pytest.raises(JobFailure, match="not a chat completion"):
        read_answer(b"<html>gateway</html>", "m", "scene_recap")
