"""The story `recap-proxy eval` tests a model's memory on. Pure.

A role-play between Tom and Ava in scenes of equal length, each at a place of its own and
ending with a plain closure ("...: that was the end of the day there."), as any model can
tell. Every scene but the last plants one fact the story may need much later, of four
kinds in turn: a thing hidden somewhere, a promise, a debt, a name. Each fact has the
words that must come back in the inserted memory for it to count as recalled, and the
question the user asks about it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

USER, CHAR = "Tom", "Ava"
PLACES = (
    "Mill Hollow", "Crow Tower", "Saltmarsh", "the Greyford crossing", "Ember Hill",
    "Thornwick", "the Sunken Abbey", "Harrow Fair", "the Glass Lake", "Wren Harbour",
    "the Ash Road", "Dunmere Keep",
)  # fmt: skip
THINGS = (
    "Amber Lantern", "Brass Compass", "Cobalt Locket", "Ivory Flute", "Jade Seal",
    "Obsidian Mask", "Scarlet Quill", "Copper Sextant", "Silver Bell", "Onyx Ring",
)  # fmt: skip
SPOTS = (
    "the Weeping Bridge", "the Old Well", "the Hollow Oak", "the Chapel Ruin", "the Toll House",
    "the Lime Kiln", "the Stone Circle", "the Ferry Post", "the Cider Press", "the Boat Shed",
)  # fmt: skip
NAMES = ("Oswin Brandt", "Maelis Corr", "Tobiah Venn", "Idris Hale", "Sabeth Rowe")
DAYS = ("midsummer", "the first frost", "the harvest moon", "the spring fair", "new year")
ACTIONS = (
    "walks ahead and looks at the road", "stops to listen to the wind", "shares some bread",
    "checks the map again", "laughs at an old joke", "keeps watch while the other rests",
    "asks about the weather", "points at the smoke on the horizon", "hums a tune",
    "counts the coins left in the purse", "tightens the straps of the pack",
    "asks what they should do next",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fact:
    scene: int  # the scene it was planted in
    message: int  # the message that says it
    kind: str  # "hidden", "promise", "debt" or "name"
    sentence: str
    terms: tuple[str, ...]  # every one must be in the inserted memory
    question: str


@dataclass(frozen=True, slots=True)
class EvalStory:
    messages: list[dict[str, Any]]  # as ST saves them
    facts: list[Fact]
    breaks: list[int]  # the message each scene but the last ends at


def _fact(n: int, scene: int, message: int, place: str) -> Fact:
    kind = ("hidden", "promise", "debt", "name")[n % 4]
    thing, spot = THINGS[n % len(THINGS)], SPOTS[(n * 3) % len(SPOTS)]
    name, day = NAMES[n % len(NAMES)], DAYS[n % len(DAYS)]
    if kind == "hidden":
        sentence = f"{CHAR} hides the {thing} under {spot} so that no one finds it."
        return Fact(scene, message, kind, sentence, (thing, spot.removeprefix("the ")),
                    f"Where did you hide the {thing}?")  # fmt: skip
    if kind == "promise":
        sentence = f"{USER} promises {CHAR} to bring the {thing} back to {place} by {day}."
        return Fact(scene, message, kind, sentence, (thing, day),
                    f"What did I promise you about the {thing}?")  # fmt: skip
    if kind == "debt":
        crowns = 12 + 7 * n
        sentence = f"{CHAR} borrows {crowns} silver crowns from {name} and owes them to {name}."
        return Fact(scene, message, kind, sentence, (str(crowns), name),
                    f"How much do you owe {name}?")  # fmt: skip
    sentence = f"The ferryman at {place} tells them his name: {name}."
    return Fact(scene, message, kind, sentence, (name, "ferryman"),
                f"What was the name of the ferryman at {place}?")  # fmt: skip


def eval_story(messages: int = 300, scenes: int = 10, seed: int = 7) -> EvalStory:
    """`messages` messages (the last the user's) in `scenes` scenes of equal length."""
    if scenes < 2 or messages < scenes * 4:
        raise ValueError("the story needs at least 2 scenes of at least 4 messages each")
    rng = random.Random(seed)
    length = messages // scenes
    out: list[dict[str, Any]] = []
    facts: list[Fact] = []
    breaks: list[int] = []
    for i in range(messages):
        scene = min(i // length, scenes - 1)
        place = PLACES[scene % len(PLACES)]
        is_user = i % 2 == 1
        who, other = (USER, CHAR) if is_user else (CHAR, USER)
        text = f"At {place}, {who} {rng.choice(ACTIONS)} while {other} {rng.choice(ACTIONS)}."
        start = scene * length
        closing = scene < scenes - 1
        if closing and i == _char_at(start + length // 3):
            fact = _fact(len(facts), scene, i, place)
            facts.append(fact)
            text += " " + fact.sentence
        if closing and i == _char_at(start + length - 2):
            text += f" {CHAR} and {USER} leave {place} behind: that was the end of the day there."
            breaks.append(i)
        out.append(_message(i, who, is_user, text))
    if out[-1]["is_user"] is False:
        out.append(_message(messages, USER, True, "What should we do now?"))
    return EvalStory(out, facts, breaks)


def _char_at(i: int) -> int:
    """The first of Ava's messages at or after `i` (hers are the even ones)."""
    return i + i % 2


def _message(i: int, name: str, is_user: bool, text: str) -> dict[str, Any]:
    return {"name": name, "is_user": is_user, "is_system": False,
            "send_date": f"2026-12-06T10:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
            "mes": text, "swipes": [text], "swipe_id": 0, "extra": {}}  # fmt: skip


def chat_file(story: EvalStory) -> bytes:
    """The story as ST saves a chat: a header line, then a message a line."""
    header = {"user_name": USER, "character_name": CHAR,
              "chat_metadata": {"integrity": "recap-proxy-eval"}}  # fmt: skip
    rows = [header, *story.messages]
    return ("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n").encode()
