"""What tells a real answer from the prompt coming back, on the bundled templates and the
answers a small model really gave (a Gemma 3 270M on llama.cpp's server)."""

from __future__ import annotations

import pytest

from proxy.core.genuine import Genuine, NotAnAnswer, check_related, related
from proxy.core.render import Template
from proxy.settings.templates import bundled_template


def genuine(name: str) -> Genuine:
    return Genuine(Template(bundled_template(f"{name}.md").read_text("utf-8")).literals)


def test_the_templates_placeholders_are_refused_wherever_they_stand() -> None:
    scene = genuine("scene_recap")
    assert scene.placeholders == {"<shorttitle>", "<recap>", "<name>", "<othername>", "<fact>"}
    for fields in (["<short title >", "<recap>"], ["The mill", "<RECAP>"],
                   ["<short title>", "Ava met Tom."]):  # fmt: skip
        with pytest.raises(NotAnAnswer, match="placeholders"):
            scene.check_fields(fields)
    with pytest.raises(NotAnAnswer, match="placeholders"):
        genuine("running_recap").check_fields(["<the whole new running recap>"])
    with pytest.raises(NotAnAnswer):  # a field that is a bare token of any kind
        scene.check_fields(["<anything at all>"])
    # The story's own tags in a recap are no placeholders.
    scene.check_fields(["At the gate", "Ava hid the <status> block and the key."])


def test_an_answer_that_holds_the_prompts_instructions_is_an_echo() -> None:
    detect = genuine("detect_scene_break")
    prompt = (
        Template(bundled_template("detect_scene_break.md").read_text("utf-8"))
        .render(
            {
                "messages": "Message #3: Ava leaves.",
                "user": "Tom",
                "char": "Ava",
                "earliest_allowed_break": "2",
                "latest_allowed_break": "9",
                "minimum_scene_length": "3",
            }
        )
        .text
    )
    with pytest.raises(NotAnAnswer, match="copies the prompt back"):
        detect.check_text(prompt + "\nMessage #4: and on it went")
    # The template's own example answer, alone, is a real answer ("no break").
    detect.check_text(
        '{"sceneBreakAt": false, "rationale": "No scene break in the eligible range"}'
    )
    detect.check_text('```json\n{"sceneBreakAt": 5, "rationale": "Ava leaves"}\n```')


def test_a_recap_about_something_else_is_refused() -> None:
    scene = "Ava hid the silver key under the third stone of the mill. Tom promised to return."
    assert related("Ava hides the key at the mill; Tom will come back.", scene)
    assert related("Nothing much.", scene)  # too short to tell: passes
    with pytest.raises(NotAnAnswer, match="shares no word"):
        check_related("Quarterly shipping volumes rose across northern harbours.", scene, "recap")


def test_a_story_in_a_script_without_spaces_is_recapped_as_any() -> None:
    """Chinese and Japanese write words without spaces: a recap is told related by the
    pairs of characters it shares, not by whole runs that never repeat."""
    scene = "艾娃把银钥匙藏在磨坊的第三块石头下面。汤姆答应明天回来。"
    assert related("艾娃藏了银钥匙，汤姆会回来。", scene)
    assert not related("季度航运量在北方港口大幅上升，贸易繁荣，市场扩大。", scene)
    japanese = "エヴァは銀の鍵を水車小屋の石の下に隠した。"
    assert related("エヴァが鍵を隠した。", japanese)
