"""The story `recap-proxy eval` tests a model on: scenes that end plainly, and facts that
each have the words and the question that test them."""

from __future__ import annotations

import json

import pytest

from proxy.cli.eval_story import CHAR, USER, chat_file, eval_story


def test_scenes_end_plainly_and_every_closed_scene_plants_a_fact() -> None:
    story = eval_story(300, 10)
    assert len(story.messages) == 300 and story.messages[-1]["is_user"]
    assert story.breaks == [28 + 30 * n for n in range(9)]
    for end in story.breaks:
        assert "that was the end of the day there" in story.messages[end]["mes"]
        assert story.messages[end]["name"] == CHAR
    assert [f.scene for f in story.facts] == list(range(9))
    assert {f.kind for f in story.facts} == {"hidden", "promise", "debt", "name"}
    for fact in story.facts:
        said = story.messages[fact.message]["mes"]
        assert fact.sentence in said and all(t in said for t in fact.terms)
        assert fact.message < story.breaks[fact.scene]


def test_a_story_is_its_seeds_and_any_size_fits() -> None:
    assert eval_story(120, 4, seed=3) == eval_story(120, 4, seed=3)
    assert eval_story(120, 4, seed=3).messages != eval_story(120, 4, seed=4).messages
    odd = eval_story(41, 3)
    assert odd.messages[-1]["is_user"] and len(odd.breaks) == 2 and len(odd.facts) == 2
    with pytest.raises(ValueError, match="at least 2 scenes"):
        eval_story(10, 5)


def test_the_chat_file_is_as_st_saves_it() -> None:
    lines = chat_file(eval_story(40, 2)).decode().splitlines()
    header = json.loads(lines[0])
    assert header["user_name"] == USER and header["character_name"] == CHAR
    assert len(lines) == 41 and json.loads(lines[1])["name"] == CHAR
