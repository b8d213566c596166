"""Scene-break windows, answer checks and scene formatting."""

from __future__ import annotations

import random

import pytest

from proxy.core.replies import ReplyError
from proxy.core.scenes import (
    DetectionRules,
    Window,
    detection_messages,
    detection_window,
    messages_until_window,
    read_break,
    scene_name,
    shown,
    strip_decoration,
)
from proxy.sillytavern.chatfile import STMessage


def window(scene: list[int], checked: int | None = None, **kw: int) -> Window | None:
    args = {"minimum": 10, "offset": 8, "every": 3, "size": 40, **kw}
    return detection_window(scene, checked=checked, rules=DetectionRules(**args))


def test_the_report_example_window() -> None:
    # ST-Auto-Recap's Appendix C: break at #40, new message #71, offset 8, minimum 10.
    found = window(list(range(41, 72)))
    assert found is not None
    assert found.choosable == tuple(range(50, 64))  # the 10th message may end the scene
    assert found.shown[0] == 46 and found.shown[-1] == 71


def test_no_call_when_a_break_cannot_be_accepted() -> None:
    assert window(list(range(0, 8))) is None  # all in the offset zone
    assert window(list(range(0, 17))) is None  # 9 eligible: fewer than the minimum
    assert window(list(range(0, 18)), every=1) is not None  # ST-Auto-Recap's pace


def test_the_first_check_of_a_scene_waits_for_a_full_stride() -> None:
    assert window(list(range(0, 19))) is None  # two choosable (9, 10): fewer than `every`
    first = window(list(range(0, 20)))
    assert first is not None and first.choosable == (9, 10, 11)
    assert window(list(range(0, 30)), every=16) is None  # 13 choosable
    wide = window(list(range(0, 33)), every=16)
    assert wide is not None and wide.choosable == tuple(range(9, 25))
    assert window(list(range(0, 30)), every=60, size=10) is not None  # at most a window


def test_after_a_negative_check_wait_for_new_messages() -> None:
    scene = list(range(0, 30))
    assert window(scene, checked=21) is None  # 8 newer messages: only the offset zone
    assert window([*scene, 30, 31], checked=21) is None
    later = window([*scene, 30, 31, 32], checked=21)
    assert later is not None and later.choosable == (22, 23, 24)


def test_how_many_messages_until_the_next_window() -> None:
    # The defaults: a new chat's first check comes with its 37th message (the 10th may end
    # the scene, 20 to choose from, 8 of context after them).
    rules = DetectionRules(minimum=10, offset=8, every=20, size=40)
    assert messages_until_window(list(range(7)), checked=None, rules=rules) == 30
    assert messages_until_window([], checked=None, rules=rules) == 37
    assert messages_until_window(list(range(37)), checked=None, rules=rules) == 0
    # After a check that found nothing up to #40: 28 newer messages (8 of context).
    assert messages_until_window(list(range(50)), checked=40, rules=rules) == 19


@pytest.mark.parametrize("seed", range(40))
def test_the_count_is_where_detection_would_first_give_a_window(seed: int) -> None:
    rng = random.Random(seed)
    rules = DetectionRules(
        minimum=rng.randint(1, 12),
        offset=rng.randint(0, 9),
        every=rng.randint(1, 25),
        size=rng.randint(5, 40),
    )
    scene = sorted(rng.sample(range(300), rng.randint(0, 60)))  # hidden ones leave gaps
    checked = rng.choice([None, *scene]) if scene else None
    more = messages_until_window(scene, checked=checked, rules=rules)
    after = max(scene[-1] if scene else -1, -1 if checked is None else checked)
    grown = [*scene, *range(after + 1, after + 1 + more)]
    assert detection_window(grown, checked=checked, rules=rules) is not None
    if more:
        assert detection_window(grown[:-1], checked=checked, rules=rules) is None


def test_the_window_is_capped() -> None:
    found = window(list(range(0, 200)), size=20)
    assert found is not None and found.choosable == tuple(range(9, 29))


def test_read_break_validates_the_answer() -> None:
    w = Window(shown=tuple(range(0, 20)), choosable=(9, 10, 11), minimum=10)
    assert read_break('{"sceneBreakAt": 10, "rationale": "\\"She left.\\""}', w)[0] == 10
    assert read_break('{"sceneBreakAt": false, "rationale": "none"}', w)[0] is None
    assert read_break('Sure: {"sceneBreakAt": "#11", "rationale": "x",}', w)[0] == 11
    with pytest.raises(ReplyError, match="not one of the eligible"):
        read_break('{"sceneBreakAt": 3, "rationale": "x"}', w)
    with pytest.raises(ReplyError, match="formatting"):
        read_break('{"sceneBreakAt": 10, "rationale": "the --- separator"}', w)
    with pytest.raises(ReplyError):
        read_break("no idea", w)


def test_decorations_are_never_shown_or_chosen() -> None:
    text = "She left.\n---\n* * *\nChapter 3\nMorning came."
    assert strip_decoration(text) == "She left.\n\nMorning came."
    assert not shown(STMessage(mes="  ***  "), "both")
    assert not shown(STMessage(mes="hidden", is_system=True), "both")
    assert shown(STMessage(mes="hidden", is_system=True), "both", hidden=True)
    # ST's own notices are not the story, hidden messages read or not; /comment's are.
    for kind, read in [("group", False), ("help", False), ("comment", True)]:
        message = STMessage.from_json(
            {"mes": "A notice.", "is_system": True, "extra": {"type": kind}}
        )
        assert shown(message, "both", hidden=True) is read
    assert shown(STMessage(mes="Hi", is_user=True), "user")
    assert not shown(STMessage(mes="Hi", is_user=True), "character")


def test_numbering_marks_context_messages() -> None:
    w = Window(shown=(1, 2, 3), choosable=(2,), minimum=1)
    messages = {i: STMessage(name="Ava", mes=f"text {i}") for i in (1, 2, 3)}
    text = detection_messages(w, messages)
    assert "Message #invalid choice [CHARACTER]: text 1" in text
    assert "Message #2 [CHARACTER]: text 2" in text


def test_scene_names() -> None:
    assert scene_name(' "The Mill" ', 3, 9, append_range=True) == "The Mill 3-9"
    long = scene_name("x" * 80, 0, 1, append_range=False)
    assert len(long) == 48 and long.endswith("…")
    assert scene_name("", 0, 1, append_range=False) == "Scene"
