"""`[memory]`: its checks, and the rules it hands to planning."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.settings.memory import LLMSettings, MemorySettings


def test_the_old_switch_for_message_recaps_still_reads() -> None:
    assert MemorySettings.model_validate({"message_recaps": True}).message_recaps == "always"
    assert MemorySettings.model_validate({"message_recaps": False}).message_recaps == "off"
    assert MemorySettings.model_validate({"message_recaps": "needed"}).message_recaps == "needed"


def test_an_unknown_operation_override_is_named() -> None:
    with pytest.raises(ValidationError, match="scene_recapp"):
        LLMSettings.model_validate({"operations": {"scene_recapp": {"max_tokens": 10}}})


def test_the_llm_url_must_be_http_and_loses_its_trailing_slash() -> None:
    assert LLMSettings(base_url="http://127.0.0.1:8080/v1/").base_url == "http://127.0.0.1:8080/v1"
    with pytest.raises(ValidationError, match="http"):
        LLMSettings(base_url="127.0.0.1:8080")


def test_a_strip_pattern_that_is_no_regular_expression_is_named() -> None:
    with pytest.raises(ValidationError, match=r"'\(unclosed' is not a regular expression"):
        MemorySettings.model_validate({"strip_patterns": ["(unclosed"]})


def test_a_running_recap_budget_the_model_could_never_answer_is_refused() -> None:
    with pytest.raises(ValidationError, match="running_recap_max_tokens"):
        MemorySettings.model_validate(
            {"running_recap_max_tokens": 5000, "llm": {"max_tokens_cap": 4096}}
        )


def test_stepping_needs_a_step_and_trimming() -> None:
    assert MemorySettings().stepped_history
    assert not MemorySettings(history_cut_step=1).stepped_history
    assert not MemorySettings(auto_hide_scene_count=-1).stepped_history


def test_a_models_own_context_size_wins_over_the_default() -> None:
    settings = MemorySettings(context_size=8192, context_sizes={"big": 32768})
    assert settings.context_for("big") == 32768
    assert settings.context_for("other") == settings.context_for(None) == 8192


def test_the_rules_carry_the_settings_they_are_made_of() -> None:
    settings = MemorySettings(include_user_messages=True, disabled_group_members=["Bo"])
    rules = settings.recap_rules()
    assert rules.include_user and rules.disabled_members == frozenset({"Bo"})
    detection = MemorySettings(minimum_scene_length=7).detection_rules()
    assert detection.minimum == 7
