from __future__ import annotations

import pytest
from pydantic import BaseModel

from proxy.core.replies import ReplyError, extract_json, read_reply


class SceneRecap(BaseModel):
    scene_name: str
    recap: str


@pytest.mark.parametrize(
    ("text", "prefill"),
    [
        ('{"scene_name": "Glade", "recap": "They met."}', ""),
        ('```json\n{"scene_name": "Glade", "recap": "They met."}\n```', ""),
        ('Sure! Here it is:\n{"scene_name": "Glade", "recap": "They met.",}\nHope it helps.', ""),
        ('"scene_name": "Glade", "recap": "They met."}', "{"),
        ('{"scene_name": "Glade", "recap": "They met."}', "{"),
        (
            '<think>The scene is in the glade {maybe}.</think>\n{"scene_name": "Glade", '
            '"recap": "They met."}',
            "",
        ),
    ],
)
def test_replies_in_every_wrapping(text: str, prefill: str) -> None:
    recap, _ = read_reply(text, SceneRecap, prefill=prefill)
    assert recap == SceneRecap(scene_name="Glade", recap="They met.")


def test_reasoning_is_kept_apart() -> None:
    reply = extract_json('<think>First the glade.</think>{"recap": "x"}')
    assert reply.reasoning == "First the glade." and reply.data == {"recap": "x"}


def test_braces_inside_strings_do_not_confuse_the_scanner() -> None:
    reply = extract_json('note {not json} then {"recap": "a } and a { inside \\" quote"}')
    assert reply.data == {"recap": 'a } and a { inside " quote'}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("I cannot do that.", "no JSON object"),
        ('{"recap": ', "no JSON object"),
        ('{"scene_name": 3}', "reply does not fit SceneRecap: scene_name: Input should be"),
    ],
)
def test_unusable_replies_say_why(text: str, message: str) -> None:
    with pytest.raises(ReplyError, match=message):
        read_reply(text, SceneRecap)
