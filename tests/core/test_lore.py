from __future__ import annotations

from proxy.core.fingerprints import normalize
from proxy.core.lore import (
    LoreMatcher,
    StickyTracker,
    WorldEntry,
    prepare,
    snapshot,
    st_sticky_keys,
)


def entries(*contents: str, **fields: object) -> list[WorldEntry]:
    return [
        WorldEntry.model_validate({"uid": i, "content": c, **fields})
        for i, c in enumerate(contents)
    ]


def test_content_is_matched_after_macros_and_whitespace() -> None:
    lore = prepare(
        "Eldoria",
        entries("{{char}} guards   the glade\nfor {{user}}.", "Shadowfangs hunt at night.", ""),
        {"char": "Seraphina", "user": "Arden"},
    )
    matcher = LoreMatcher(lore)
    prompt = normalize("Main prompt.\nSeraphina guards the glade for Arden.\nMore text.")
    assert matcher.active(prompt) == {0}
    assert matcher.active(normalize("Shadowfangs hunt at night. Seraphina guards")) == {1}


def test_entries_sharing_an_opening_are_told_apart() -> None:
    opening = "The river spirits of Eldoria are old and patient beings who "
    lore = prepare("W", entries(opening + "sing.", opening + "weep."), {})
    assert LoreMatcher(lore).active(normalize("x " + opening + "weep. y")) == {1}


def test_disabled_entries_do_not_apply() -> None:
    assert prepare("W", entries("a", disable=True), {}) == []


def test_sticky_lifecycle_over_generations() -> None:
    lore = prepare(
        "W",
        [
            WorldEntry(uid=7, content="Rain falls.", sticky=2),
            WorldEntry(uid=8, content="Always.", constant=True),
        ],
        {},
    )
    tracker = StickyTracker()
    strategies = []
    # target message indices: 4 (activated), 4 again (a swipe), 6, 8 (still carried), 10
    for target in (4, 4, 6, 8, 10):
        tracker.advance(target)
        shot = snapshot(lore, {0, 1}, tracker, set())
        strategies.append({e["uid"]: e["strategy"] for e in shot["active"]})
    assert [s[7] for s in strategies] == ["normal", "sticky", "sticky", "normal", "sticky"]
    assert all(s[8] == "constant" for s in strategies)


def test_st_timed_world_info_marks_sticky() -> None:
    metadata = {"timedWorldInfo": {"sticky": {"Eldoria.3": {"start": 3, "end": 6}}, "cooldown": {}}}
    assert st_sticky_keys(metadata, 5) == {("Eldoria", "3")}
    assert st_sticky_keys(metadata, 6) == set()
    lore = prepare("Eldoria", [WorldEntry(uid=3, content="x")], {})
    shot = snapshot(lore, {0}, StickyTracker(), {("Eldoria", "3")})
    assert shot["active"][0]["strategy"] == "sticky"
    assert set(shot["active"][0]) == {
        "uid",
        "world",
        "comment",
        "keys",
        "position",
        "depth",
        "order",
        "role",
        "constant",
        "sticky",
        "strategy",
        "content_hash",
    }
