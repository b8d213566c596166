"""A chat played at random as a user plays it, then its memory checked against the file.

Exchanges (streamed or not), swipes, continues, impersonations, edits anywhere,
deletions at the end and in the middle, messages moved and hidden, branches, checkpoints
and renames as ST makes them, going back to a chat left earlier, in a one-to-one chat or
a group chat, sent as a chat completion (names in the messages, and system messages
squashed, as ST's settings may have them), to Claude or as a text completion in the
instruct templates ST ships (some with ST's Author's Note, the system's or the user's),
and the page's corrections (scene breaks set and removed, recaps edited and made again, the
running recap edited), in a seeded random order, without waiting for the memory between
them. Once the queue is idle, the memory of each chat that got a request must say what its
file says: scenes follow each other from the first message, each recap the model wrote is
of its scene's messages as they are now (the fake model's recap names its first message
and counts them; the recap's record says it was made from them), the running recap has
folded in the last scene, no message recap of the model's is of an old text, no job
failed, and nothing was logged as a warning or an error.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import random
import re
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

import proxy.memory.engine as engine_module
from bench.words import CHAT_WORDS
from proxy.core.operations import Operation
from proxy.memory.chatinfo import swipe_of
from proxy.memory.ops.scene_recap import SceneRecapHandler
from proxy.memory.views.request import history_start, request_memory, stands_for
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.web.keys import RUNTIME
from tests.conftest import seed_list
from tests.fakes.fake_llm import END_SCENE
from tests.memory.st_wire import (
    PRESETS,
    chat_message,
    claude,
    post_processed,
    squashed,
    st_settings,
    text_prompt,
    with_note,
    with_reasoning,
    without_status,
)
from tests.memory.story import CHAR, USER
from tests.memory_env import Memory, MemoryFactory
from tests.st_data import save_like_st

STEPS = 150
# Messages ST keeps in its prompt, per seed: all of them, or a cut that moves. 630 to 2229
# came from hunts over every mix of the dimensions below: ST merged replies that a regex
# script had changed (post-processed, and Claude: in a group chat, and before a merged
# impersonation prompt), and a group's first reply continued (instruct off, ChatML; and
# with the status block cut, instruct off); 3500, a single user message of a group whose
# replies a regex script changed, a reasoning model's; 2615, a single user message whose
# impersonation prompt ST squashed into its post-history instructions; 2636, 2229's with
# the reasoning ST writes before a continued reply; 2755, where (one run in four) a scene
# recap made of other messages than its job's input was kept as one of that input; 2735, a
# single user message sent as its save is read, the reply before it quoting the user's
# lines; 3940, a group member's reasoning reply continued with instruct off, his only line;
# 4842, a single user message's impersonation after a branch whose parent kept the branch's
# messages, their texts no longer; 5039, a group's single user message whose changed reply
# came before the group nudge and the post-history instructions; 5325, with instruct off,
# a continue of the last reply in a chat whose branch, saved since, ends just before it;
# 6220, Alpaca (its story string in no turn): a group's greeting and the next member's
# reply asked for with no message of the user's; 5928, a single user message continuing a
# group's reply that a regex script changed and that writes the user's lines three times.
CONTEXT = {1: 10_000, 2: 24, 3: 40, 4: 10_000, 5: 24, 6: 24, 7: 10_000, 8: 24, 9: 40, 10: 10_000,
           11: 24, 12: 40, 13: 24, 14: 40, 15: 10_000, 16: 24, 17: 40, 18: 24, 19: 40,
           20: 10_000, 101: 10_000, 102: 24, 103: 24, 104: 10_000, 105: 40, 106: 24, 107: 24,
           108: 10_000, 109: 40, 110: 24, 111: 40, 112: 10_000, 113: 10_000, 114: 24, 115: 24,
           630: 10_000, 661: 24, 663: 10_000, 696: 10_000, 735: 10_000, 861: 10_000,
           2229: 24, 2615: 40, 2636: 40, 2735: 10_000, 2755: 24, 3500: 10_000,
           3940: 10_000, 4842: 24, 5039: 10_000, 5325: 10_000, 5928: 10_000, 6220: 40}  # fmt: skip
# Seeds played in a group chat.
GROUP = {6, 7, 11, 12, 16, 17, 19, 20, 106, 111, 114, 661, 663, 696, 735, 2229, 2636, 2755,
         3500, 3940, 5039, 5928, 6220}  # fmt: skip
# Seeds played over another connection than a chat completion: Claude ("use system prompt"
# off, or on), a text completion with instruct off or in one of the instruct templates ST
# ships (`tests.memory.st_wire`).
WIRES = {8: "claude", 9: "chatml", 10: "plain", 11: "claude+system", 12: "chatml",
         13: "llama3", 14: "mistral", 15: "alpaca", 16: "gemma", 17: "alpaca", 104: "chatml",
         105: "claude", 106: "plain", 108: "claude", 109: "chatml",
         661: "plain", 663: "claude+system", 696: "chatml", 735: "claude+system",
         861: "claude+system", 2229: "plain", 2636: "plain", 2755: "mistral",
         3940: "plain", 5325: "plain", 6220: "alpaca"}  # fmt: skip
# Chat completion seeds whose ST names the speakers in every message (`st_wire.chat_message`)
# and puts its Author's Note in as the user's in some requests.
NAMES = {18: "content", 19: "completion", 102: "content", 630: "content", 661: "content",
         663: "content", 696: "content", 735: "content", 861: "completion",
         2735: "content", 4842: "content", 5928: "completion"}  # fmt: skip
# Chat completion seeds with post-history instructions and ST's "squash system messages".
SQUASHED = {18, 20, 101, 102, 661, 663, 861, 2615, 5039, 5928}
# Seeds of a reasoning model: its replies are saved with their reasoning, and ST writes
# that before the newest this many in each prompt ("Add to Prompts"; 0: off), and before
# a continued one always (`st_wire.with_reasoning`).
REASONING = {103: 2, 104: 0, 105: 1, 109: 1, 630: 0, 663: 0, 735: 0, 2615: 1, 2636: 0,
             2755: 2, 3500: 1, 3940: 2, 4842: 2, 5039: 2, 6220: 2}  # fmt: skip
# Seeds whose replies end with a status block that a regex script of the user's cuts out
# of every prompt (`st_wire.without_status`): the requests' replies are not the file's.
STATUS = {107, 108, 109, 115, 630, 661, 663, 696, 735, 861, 2229, 2636, 2735, 2755, 3500,
          4842, 5039, 5325, 5928}  # fmt: skip
# Chat completion seeds whose ST's server post-processes the prompt ("Prompt
# Post-Processing", `st_wire.post_processed`): same-role neighbours merged, names folded
# into the text, and ("semi", "strict") ST's own prompts after the first the user's; or
# ("single") all of it one user message, each speaker named.
POST_PROCESSED = {110: "merge", 111: "semi", 112: "strict", 113: "single", 114: "single",
                  115: "single", 630: "semi", 2615: "single", 2735: "single",
                  3500: "single", 4842: "single", 5039: "single", 5928: "single"}  # fmt: skip
# Seeds whose model writes the user's line in some replies, a paragraph `User: ...`.
QUOTING = {9, 18, 111, 113, 114, 2615, 2735, 3500, 5039, 5928}
# Text completion seeds whose ST's settings.json names the template (the proxy reads it);
# the others' templates are found by the proxy's own list.
ST_SETTINGS = {14, 16, 17}
# Seeds whose requests carry ST's Author's Note at a random depth, every other one.
NOTED = {8, 9, 10, 11, 13, 14, 15, 16, 18, 19, 20, 101, 102, 103, 105, 106, 107, 108, 110,
         111, 112, 113, 114, 115, 630, 661, 663, 696, 735, 861, 2229, 2636, 2735, 2755,
         3940, 4842, 5039, 5325, 5928, 6220}  # fmt: skip
# Settings besides the tests' quick ones, per seed: detection as its defaults space it,
# hidden messages left out of the recaps.
SETTINGS: dict[int, dict[str, Any]] = {
    4: {
        "memory.scene_break_every": 20,
        "memory.minimum_scene_length": 10,
        "memory.scene_break_offset": 8,
    },
    5: {"memory.include_hidden_messages": False},
}
SETTINGS[5928] = SETTINGS[4]
# Seeds found by `--hunt-seeds`, pinned: each is played with the scenario drawn from it.
# 2877: two checkpoints made at the same message, the older one opened and swiped: the
# request is either's (`Player.twin`). 2937: a branch's hidden messages shown again and
# the user's new one added: the chat just saved is read before the request is matched
# (`ChatLibrary._to_check`). 4036: a single user message swiped after two replies in a
# row, the reply before with its reasoning and ST's post-history instructions joined to
# it: it is the file's reply but one (`proxy.identify.changed.before_last`). 4370: a
# covered message edited, the request before planning read it again: the carried view is
# outdated and leaves nothing out (`proxy.memory.views.reread.carried`). 4514, 4533: the
# checker read a view planning put in place after the request's memory was made
# (`covering` records the one it was made from). The last three failed only under load.
# 5698 (one run in three): a turn ST merged (two replies) stepped away with both recaps
# in, the newer one the user's own ("Mine 39.", no mark): the checker credited the first
# part's mark only, and the step checked only the turn's newest position's recap; now
# every position it stands for (`proxy.memory.views.request.stands_for`), and all marks.
HUNTED: set[int] = {2877, 2937, 4036, 4370, 4514, 4533, 5698}


@dataclass(frozen=True)
class Scenario:
    """What a story is played over: one value of each dimension above."""

    context: int
    group: bool = False
    wire: str = "openai"
    names: str = "default"
    squash: bool = False
    reasoning: int | None = None
    status: bool = False
    processed: str | None = None
    quoting: bool = False
    st_settings: bool = False
    noted: bool = False
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def pinned(cls, seed: int) -> Scenario:
        """A pinned seed's, from the tables above (or drawn, for a hunted one)."""
        if seed in HUNTED:
            return cls.drawn(seed)
        return cls(
            CONTEXT[seed], seed in GROUP, WIRES.get(seed, "openai"), NAMES.get(seed, "default"),
            seed in SQUASHED, REASONING.get(seed), seed in STATUS, POST_PROCESSED.get(seed),
            seed in QUOTING, seed in ST_SETTINGS, seed in NOTED, SETTINGS.get(seed, {}),
        )  # fmt: skip

    @classmethod
    def drawn(cls, seed: int) -> Scenario:
        """A scenario drawn at random from `seed`, each dimension on about as often as the
        pinned seeds have it, over the combinations ST can send: speakers' names, squashed
        system messages and post-processing are a chat completion's; ST's settings.json
        names an instruct template."""
        rng = random.Random(f"scenario {seed}")

        def some(chance: float) -> bool:
            return rng.random() < chance

        wire = rng.choice(["openai"] * 4 + ["claude", "claude+system", "plain", *PRESETS])
        chat = wire == "openai"
        processing = ["merge", "semi", "strict", "single"]
        return cls(
            context=rng.choice([10_000, 24, 40]),
            group=some(0.4),
            wire=wire,
            names=rng.choice(["default", "content", "completion"]) if chat else "default",
            squash=chat and some(0.3),
            reasoning=rng.choice([0, 1, 2]) if some(0.3) else None,
            status=some(0.35),
            processed=rng.choice(processing) if chat and some(0.35) else None,
            quoting=some(0.25),
            st_settings=wire in PRESETS and some(0.5),
            noted=some(0.7),
            settings=rng.choice([{}, {}, {}, SETTINGS[4], SETTINGS[5]]),
        )  # fmt: skip


CONTINUE = "[Continue your last message without repeating its original content.]"
IMPERSONATE = (
    f"[Write your next reply from the point of view of {USER}, using the chat history so far "
    f"as a guideline for the writing style of {USER}. Don't write as {CHAR} or system. Don't "
    f"describe actions of {CHAR}.]"
)


class Player:
    """The chat file as ST keeps it, and what the user does to it."""

    def __init__(self, memory: Memory, rng: random.Random) -> None:
        self.memory, self.rng = memory, rng
        self.folder = memory.story.path.parent
        self.name = memory.story.path.stem
        self.metadata: dict[str, Any] = {"integrity": "random-story"}
        self.messages: list[dict[str, Any]] = []
        self.made = 0  # texts made so far: each text starts with its own `u<n>x` mark
        self.since_end = 0
        self.done: list[str] = []
        # The chats besides this one (branches, checkpoints, their parents), by name: their
        # messages and metadata; and those that got a request, whose memory is checked.
        self.others: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
        self.used: set[str] = set()
        self.kinds: list[str] = []  # requests told for another kind than they are
        # Per chat, what the proxy's last request's memory could leave out (`covering`):
        # the running recap's cutoff, the hashes of the texts it covered, and the marks of
        # the messages the stepped start left out with their recaps in; and the messages
        # left out of a request that were none of those (`left_out`).
        self.covered: dict[str, tuple[int, frozenset[int], set[str]]] = {}
        self.traced: dict[str, str] = {}  # per chat, the last request's memory, in words
        self.lost: list[str] = []

    # The chats' folder, as chat ids start.
    chats = f"default-user/chats/{CHAR}"
    header = True  # whether the file starts with ST's header line
    wire = "openai"  # the connection ST sends over (`WIRES`)
    names = "default"  # how ST names the speakers in a chat completion (`NAMES`)
    squash = False  # post-history instructions, and ST's "squash system messages" on
    noted = False  # whether ST's Author's Note goes into some requests
    reasoning: int | None = None  # replies with reasoning, and how many ST sends (`REASONING`)
    status = False  # replies end with a status block that ST's prompts leave out (`STATUS`)
    processed: str | None = None  # ST's post-processing of the prompt (`POST_PROCESSED`)
    quoting = False  # some replies write the user's line as `User: ...` (`QUOTING`)

    @property
    def chat_id(self) -> str:
        return f"{self.chats}/{self.name}"

    @property
    def api(self) -> str:
        return f"/recap/api/chats/{quote(self.chat_id, safe='')}"

    def text(self, is_user: bool) -> str:
        self.made += 1
        words = " ".join(self.rng.choice(CHAT_WORDS) for _ in range(self.rng.randint(12, 30)))
        text = f"u{self.made}x {words}."
        if self.quoting and not is_user and self.rng.random() < 0.3:
            # A model that writes the user's line in its reply, a paragraph of its own.
            said = " ".join(self.rng.choice(CHAT_WORDS) for _ in range(self.rng.randint(3, 8)))
            text = f"{text}\n\n{USER}: {said}.\n\nu{self.made}q she answers."
        self.since_end += 1
        if not is_user and self.since_end > self.rng.randint(8, 16):
            text, self.since_end = f"{text} {END_SCENE}", 0
        return text

    def speaker(self) -> str:
        return CHAR

    def thought(self) -> dict[str, str]:
        """A reply's `extra`: its reasoning, if the model is a reasoning one (not always)."""
        if self.reasoning is None or self.rng.random() < 0.3:
            return {}
        words = " ".join(self.rng.choice(CHAT_WORDS) for _ in range(self.rng.randint(5, 20)))
        return {"reasoning": f"I should say {words}."}

    def add(self, is_user: bool) -> None:
        text = self.text(is_user)
        if self.status and not is_user:
            text = f"{text} <status>HP {self.made}</status>"
        name = USER if is_user else self.speaker()
        self.messages.append(
            {"name": name, "is_user": is_user, "is_system": False, "send_date": "2026-11-27",
             "mes": text, "swipes": [text], "swipe_id": 0,
             "extra": {} if is_user else self.thought()}
        )  # fmt: skip

    def save(self) -> None:
        rows = self.messages
        if self.header:
            meta = {"user_name": USER, "character_name": CHAR, "chat_metadata": self.metadata}
            rows = [meta, *rows]
        data = "\n".join(json.dumps(r) for r in rows).encode() + b"\n"
        save_like_st(self.folder / f"{self.name}.jsonl", data)

    def prompt(self, shown: list[dict[str, Any]], nudge: str = "") -> list[dict[str, str]]:
        """ST's messages for the next reply after `shown` (`nudge`: see `request`)."""
        return [
            {"role": "system", "content": f"Write {CHAR}'s next reply."},
            {"role": "system", "content": "[Start a new Chat]"},
            *[chat_message(m, self.names, False) for m in shown],
        ]

    async def request(self, history: list[dict[str, Any]], context: int, nudge: str = "") -> None:
        """ST's request after `history`; `nudge`: its instruction after the chat (continue,
        impersonate)."""
        shown = [m for m in history if not m["is_system"]][-context:]
        if self.status:
            shown = without_status(shown)
        if self.reasoning is not None:
            shown = with_reasoning(shown, added=self.reasoning, continued=nudge == CONTINUE)
        after = [{"role": "system", "content": nudge}] if nudge else []
        stream = self.rng.random() < 0.5
        messages = self.prompt(shown, nudge) + after
        path = "/v1/chat/completions"
        body: dict[str, Any] = {"model": "fake-model", "messages": messages}
        note = self.rng.choice([0, 1, 2, 4, 4]) if self.noted and self.rng.random() < 0.5 else None
        if note is not None:
            # ST lets the note (and prompts "in chat") be the user's as well.
            role = self.rng.choice(["system", "user"]) if self.names != "default" else "system"
            messages = with_note(messages, note, role)
            body["messages"] = messages
        if self.squash:
            messages = squashed(messages, bool(nudge) and nudge != CONTINUE)
            body["messages"] = messages
        if self.processed:
            members = MEMBERS if isinstance(self, GroupPlayer) else ()
            messages = post_processed(messages, self.processed, USER, CHAR, members)
            body["messages"] = messages
        if self.wire.startswith("claude"):
            path, body = "/v1/messages", claude(messages, self.wire == "claude+system")
        elif self.wire in PRESETS or self.wire == "plain":
            kind = "normal" if not nudge else "continue" if nudge == CONTINUE else "impersonate"
            story = f"Write {CHAR}'s next reply."
            path = "/v1/completions"
            char = self.speaker()  # the one whose turn ends the prompt
            group = isinstance(self, GroupPlayer)
            body = text_prompt(story, shown, template=self.wire, user=USER, char=char,
                               kind=kind, note=note, group=group,
                               members=MEMBERS if group else ())  # fmt: skip
        body["stream"] = stream
        self.used.add(self.name)
        self.covered.pop(self.chat_id, None)
        self.traced.pop(self.chat_id, None)
        response = await self.memory.client.post(path, json=body)
        await response.read()
        assert response.status == 200, self.done
        self.left_out(history, context)
        if self.processed and response.headers.get("X-Recap-Injected", "0") != "0":
            # The chat's request as it went upstream, not one of the proxy's own calls.
            self.as_processed(self.memory.forwarded()[-1]["messages"])
        if len(shown) > 3:
            got = unquote(response.headers["X-Recap-Chat"])
            assert got == self.chat_id or self.twin(got), (self.done[-5:], got)
            await self.check_kind(body, path, nudge)

    def twin(self, chat_id: str) -> bool:
        """Whether `chat_id` is another chat whose file holds the very messages this one's
        does (two checkpoints made at the same message, one opened): no request tells them
        apart (ST sends no chat id), and the proxy takes the one saved last."""
        name = chat_id.rsplit("/", 1)[-1]
        other = self.others.get(name)
        texts = [m["mes"] for m in self.messages]
        return other is not None and [m["mes"] for m in other[0]] == texts

    def left_out(self, history: list[dict[str, Any]], context: int) -> None:
        """A message ST sent that is not in the request as it went upstream (its mark in
        no message, nor in a recap of it) is one the running recap covered, or one the
        stepped start left out whose recap went in, or the user's (which has none)."""
        upstream = "\n".join(strings(self.memory.forwarded()[-1]))
        cutoff, held, stood_in = self.covered.get(self.chat_id, (-1, frozenset(), set()))
        shown = [m for m in history if not m["is_system"]][-context:]
        for message in shown:
            mark = message["mes"].split()[0]
            if re.search(rf"\b{mark}\b", upstream) is not None or hash(message["mes"]) in held:
                continue
            if next(i for i, m in enumerate(history) if m is message) <= cutoff:
                continue  # edited since the running recap covered it: covered by its place
            if mark in stood_in or message["is_user"]:
                continue
            index = next(i for i, m in enumerate(history) if m is message)
            self.lost.append(
                f"{self.done[-12:]}: {mark} (position {index} of {len(history)}) left out, "
                f"not covered; {self.traced.get(self.chat_id, 'no view')}"
            )

    def as_processed(self, sent: list[dict[str, Any]]) -> None:
        """What went upstream with the memory in is as ST's post-processing leaves a
        prompt: no two neighbours of one role, and ("semi", "strict") no system message
        after the first."""
        roles = [m["role"] for m in sent]
        assert all(a != b for a, b in pairwise(roles)), roles
        if self.processed != "merge":
            assert "system" not in roles[1:], roles

    async def check_kind(self, body: dict[str, Any], path: str, nudge: str) -> None:
        """The request is told for what it is: a new reply, a swipe, a continue, or (an
        impersonation) a quiet one. Asked again of `/recap/api/identify`: the file is as
        it was when the request went."""
        if self.messages[-1]["is_system"]:
            return  # a hidden last message: ST's request ends before it
        swiped = self.done[-1:] == ["swipe"] and not self.messages[-1]["is_user"]
        want = "swipe" if swiped else "normal"
        if nudge:
            want = "continue" if nudge == CONTINUE else "quiet"
        response = await self.memory.client.post("/recap/api/identify", json=body)
        got = (await response.json())["generation"]
        if got != want:
            self.kinds.append(f"{self.done[-1:]} {path}: {got}, not {want}")

    async def until_read(self, path: Path) -> None:
        """The watcher has read the file at `path` as it is now. A user takes longer than
        that between a save and a rename, or a new chat's first message."""
        chat_id = f"{self.chats}/{path.stem}"
        texts = [m["mes"] for m in self.messages]
        await self.memory.until(
            lambda db: [r.message.mes for r in db.memory.messages_from(chat_id)] == texts,
            settle=False,
        )

    async def step(self, context: int) -> None:
        rng, messages = self.rng, self.messages
        roll = rng.random()
        if roll < 0.5 or len(messages) < 6:
            self.done.append("exchange")
            self.add(True)
            self.save()
            await self.request(messages, context)
            self.add(False)
            self.save()
        elif roll < 0.58 and not messages[-1]["is_user"]:
            self.done.append("swipe")
            await self.request(messages[:-1], context)
            last, text = messages[-1], self.text(False)
            last["swipes"].append(text)
            last["extra"].pop("reasoning", None)  # the new swipe's own, if it has one
            last["extra"].update(self.thought())
            last["swipe_id"], last["mes"] = len(last["swipes"]) - 1, text
            self.save()
        elif roll < 0.66:
            i = rng.randrange(len(messages))
            self.done.append(f"edit {i}")
            message = messages[i]
            message["mes"] = self.text(message["is_user"])
            if "swipes" in message:  # not on ST's own notices
                message["swipes"][message["swipe_id"]] = message["mes"]
            self.save()
        elif roll < 0.7:
            count = rng.randint(1, 3)
            self.done.append(f"delete the last {count}")
            del messages[-count:]
            self.save()
        elif roll < 0.72:
            i = rng.randrange(1, len(messages) - 1)
            self.done.append(f"delete {i}")
            del messages[i]
            self.save()
        elif roll < 0.74:
            i = rng.randrange(1, len(messages) - 1)
            self.done.append(f"move {i} down")
            messages[i], messages[i + 1] = messages[i + 1], messages[i]
            self.save()
        elif roll < 0.77:
            first = rng.randrange(len(messages))
            hide = rng.random() < 0.7
            self.done.append(f"{'hide' if hide else 'unhide'} from {first}")
            for message in messages[first : first + rng.randint(1, 5)]:
                message["is_system"] = hide
            self.save()
        elif roll < 0.82 and len(messages) > 10:
            await self.change_chats()
        elif roll < 0.85 and "swipes" in messages[-1] and not messages[-1]["is_user"]:
            self.done.append("continue")  # the reply grows, the same message
            await self.request(messages, context, CONTINUE)
            last = messages[-1]
            last["mes"] = last["swipes"][last["swipe_id"]] = f"{last['mes']} {self.text(False)}"
            self.save()
        elif roll < 0.87:
            self.done.append("impersonate")  # nothing is saved
            await self.request(messages, context, IMPERSONATE)
        else:
            await self.correct()

    async def change_chats(self) -> None:
        """ST's rename, checkpoint or branch of this chat, or another chat opened again."""
        old = self.folder / f"{self.name}.jsonl"
        await self.until_read(old)
        roll = self.rng.random()
        at = self.rng.randrange(len(self.messages) // 2, len(self.messages) - 1)
        if roll < 0.25:
            self.rename(f"{CHAR} - renamed {len(self.done)}")
        elif roll < 0.5:
            # ST's checkpoint: the chat up to `at` saved under a new name; the user stays.
            name = f"Checkpoint #{len(self.done)} - {self.name}"
            self.done.append(f"checkpoint at {at}")
            self.others[name] = self.copy(at)
            self.messages[at]["extra"]["bookmark_link"] = name
            self.save_as(name, *self.others[name])
            self.save()
        elif roll < 0.75 and self.others:
            name = self.rng.choice(sorted(self.others))
            self.done.append(f"open {name}")
            self.others[self.name] = (self.messages, self.metadata)
            (self.messages, self.metadata), self.name = self.others.pop(name), name
        else:
            branch = f"{self.name} - Branch #{len(self.done)}"
            self.done.append(f"branch at {at}")
            self.messages[at]["extra"].setdefault("branches", []).append(branch)
            self.save()
            self.others[self.name] = (self.messages, self.metadata)
            (self.messages, self.metadata), self.name = self.copy(at), branch
            self.save()
        await self.until_read(self.folder / f"{self.name}.jsonl")

    def rename(self, name: str) -> None:
        """ST's rename of this chat: its file moves."""
        was, self.name = self.name, name
        self.done.append(f"rename to {name}")
        (self.folder / f"{was}.jsonl").rename(self.folder / f"{name}.jsonl")
        if was in self.used:
            self.used = (self.used - {was}) | {name}

    def copy(self, at: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A branch's or checkpoint's messages (this chat's up to `at`) and metadata."""
        messages = json.loads(json.dumps(self.messages[: at + 1]))
        return messages, {"integrity": "random-story", "main_chat": self.name}

    def save_as(self, name: str, messages: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
        """Another chat's file, saved as ST saves it."""
        mine = self.name, self.messages, self.metadata
        self.name, self.messages, self.metadata = name, messages, metadata
        self.save()
        self.name, self.messages, self.metadata = mine

    async def correct(self) -> None:
        client, rng, api = self.memory.client, self.rng, self.api
        scenes = await (await client.get(f"{api}/scenes")).json()
        last = [s["index"] for s in scenes]
        which = rng.choice(["break", "unbreak", "scene", "message", "running", "again"])
        if which == "break":
            response = await client.put(
                f"{api}/messages/{rng.randrange(len(self.messages))}/scene_break", json={}
            )
        elif which == "message":
            i = rng.randrange(len(self.messages))
            response = await client.put(f"{api}/messages/{i}/recap", json={"recap": f"Mine {i}."})
        elif which == "running":
            response = await client.post(f"{api}/running", json={"content": "My story so far."})
        elif not last:
            return
        elif which == "unbreak":
            path = f"{api}/messages/{rng.choice(last)}/scene_break"
            response = await client.delete(path, json={})
        elif which == "scene":
            path = f"{api}/scenes/{rng.choice(last)}/recaps"
            response = await client.post(path, json={"recap": "My own recap."})
        else:
            response = await client.post(f"{api}/scenes/{rng.choice(last)}/regenerate", json={})
        self.done.append(f"{which}: {response.status}")
        assert response.status < 500, (self.done[-5:], await response.text())


MEMBERS = ("Orin", "Seraphina")


class GroupPlayer(Player):
    """A group chat as ST 1.12 keeps it: a hidden notice first, no header line (or one, as
    later versions write it), and its group's file in `groups/` naming the chat."""

    chats = "default-user/group chats"

    def __init__(self, memory: Memory, rng: random.Random) -> None:
        super().__init__(memory, rng)
        self.folder = memory.story.path.parents[2] / "group chats"
        self.name = "2026-11-27@10h00m00s"
        self.header = rng.random() < 0.5
        notice = "Group chat created. Say 'Hi' to lovely people!"
        self.messages.append(
            {"name": "SillyTavern System", "is_user": False, "is_system": True, "mes": notice,
             "send_date": "2026-11-27", "extra": {"isSmallSys": True, "type": "group"}}
        )  # fmt: skip
        self.write_group()

    def write_group(self) -> None:
        group = {"id": "1795362670890", "name": "The Group", "chat_id": self.name,
                 "members": ["Orin.png", "Seraphina.png"], "chats": [self.name]}  # fmt: skip
        path = self.folder.parent / "groups" / "1795362670890.json"
        save_like_st(path, json.dumps(group).encode())

    def speaker(self) -> str:
        return self.rng.choice(MEMBERS)

    def prompt(self, shown: list[dict[str, Any]], nudge: str = "") -> list[dict[str, str]]:
        # Each member's reply carries its name; ST's nudge names who answers next (but for
        # an impersonation: `noGroupNudgeTypes`).
        speaker = self.speaker()
        impersonation = nudge and nudge != CONTINUE
        group_nudge = f"[Write the next reply only as {speaker}.]"
        return [
            {"role": "system", "content": f"Write {speaker}'s next reply."},
            {
                "role": "system",
                "content": f"[Start a new group chat. Group members: {', '.join(MEMBERS)}]",
            },
            *[chat_message(m, self.names, True) for m in shown],
            *([] if impersonation else [{"role": "system", "content": group_nudge}]),
        ]

    async def change_chats(self) -> None:
        # Renamed only: branches are played in the one-to-one chats.
        await self.until_read(self.folder / f"{self.name}.jsonl")
        self.rename(f"renamed {len(self.done)}")
        self.write_group()
        await self.until_read(self.folder / f"{self.name}.jsonl")


def problems(player: Player, db: Database, hidden_read: bool) -> list[str]:
    """Where the chat's memory does not say what its file says. `hidden_read`: whether
    scene recaps read hidden messages."""
    found: list[str] = []
    memory, chat_id, messages = db.memory, player.chat_id, player.messages
    handler = player.memory.engine.handlers[Operation.SCENE_RECAP]
    assert isinstance(handler, SceneRecapHandler)
    scenes = [b for b in memory.breaks(chat_id) if b.visible]
    start = 0
    for scene in scenes:
        if memory.position_of(scene.uid) is None:
            continue
        first, last = start, scene.position
        start = last + 1
        read = [
            m
            for m in messages[first : last + 1]
            if (hidden_read or not m["is_system"]) and m["extra"].get("type") != "group"
        ]
        recap = memory.current_scene_recap(scene)
        if recap is None:
            if read:  # a scene of hidden messages only has nothing to recap
                found.append(f"scene {first}-{last}: no recap")
            continue
        made = re.match(r"(\d+) messages, from: (u\d+x)", recap.recap)
        if recap.source in ("edit",) or not read:
            continue
        if made is None:
            found.append(f"scene {first}-{last}: recap {recap.recap[:40]!r} ({recap.source})")
            continue
        newest = memory.scene_recaps(scene.uid)[-1]
        if newest.version == recap.version and (
            memory.scene_recap_input(scene.uid, recap.version)
            != handler.scene_input(db, chat_id, scene.uid)
        ):
            found.append(f"scene {first}-{last}: recap v{recap.version} of the scene as it was")
        # The fake model counts the scene's paragraphs (a reply that quotes the user's line
        # has three).
        if int(made.group(1)) != sum(len(m["mes"].split("\n\n")) for m in read):
            found.append(f"scene {first}-{last}: a recap of {made.group(1)} messages")
        mark = read[0]["mes"].split()[0]
        if made.group(2) != mark:
            found.append(f"scene {first}-{last}: a recap from {made.group(2)}, not {mark}")
    running = memory.running_recaps(chat_id)
    if scenes:
        current = [v for v in running if v.new_scene_uid == scenes[-1].uid]
        if not current:
            found.append(f"the running recap has not folded in the scene ending at {start - 1}")
    recaps = memory.message_recaps(chat_id)
    for record in memory.messages_from(chat_id):
        done = recaps.get((record.uid, swipe_of(record)))
        if done is None or done.edited or done.source_hash != text_hash(record.message.mes):
            continue  # none, yours, or known to be of an old text
        mark = re.match(r"#\d+: (u\d+x)", done.recap)
        if mark is None or mark.group(1) != record.message.mes.split()[0]:
            found.append(f"message {record.position}: {done.recap[:20]!r} taken as fresh")
    failed = db.jobs.first_failure(chat_id, 0.0)
    if failed is not None:
        found.append("a job failed")
    return found


def strings(value: Any) -> list[str]:
    """The strings in a JSON value (a request's texts, its newlines as they are)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for item in value for s in strings(item)] if isinstance(value, list) else []


def covering(memory: Memory, player: Player, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep, for each request's memory, what may be left out of it: through the running
    recap's cutoff, the messages it covered (their exact texts) and the positions up to
    it; the marks of the messages the stepped start left out whose recap went in. And
    check that the recaps that went in are of texts the chat shows."""
    engine = memory.engine
    inner = engine.request_memory
    # The view the request's memory was made from: planning, on the store's thread, may
    # put the next one in place before `recorded` reads it (a trace of that one told of a
    # cutoff the request never saw).
    used: list[Any] = [None]
    made = request_memory

    def seen(view: Any, *args: Any) -> Any:
        used[0] = view
        return made(view, *args)

    monkeypatch.setattr(engine_module, "request_memory", seen)

    def recorded(ident: Any, messages: Any, history: Any, *args: Any) -> Any:
        used[0] = None
        got = inner(ident, messages, history, *args)
        # A recap that goes in is of a text the chat shows now: not of a message deleted,
        # hidden or changed since (its own `u<n>x` mark tells which text it was made from).
        shown = {m["mes"].split()[0] for m in player.messages if not m["is_system"]}
        made = set(re.findall(r"#\d+: (u\d+x)", got.values.get("recent_recaps", "")))
        if made - shown:
            player.lost.append(f"{player.done[-1:]}: recaps of {sorted(made - shown)} went in")
        view = used[0]
        if view is None or not view.running:
            player.traced[ident.chat_id] = (
                f"no running recap (view {'none' if view is None else 'without one'}); "
                f"request: {ident.generation}, history {list(ident.history)} at "
                f"{list(ident.positions)}, drop {list(got.drop)}, turns "
                f"{[(i, m.role, m.text[:24]) for i, m in enumerate(messages)]}"
            )
            player.covered[ident.chat_id] = (-1, frozenset(), set())
            return got
        _, stepped = history_start(view, engine.upkeep.settings, ident, history)
        # The positions whose recap line went in, not every one the shelf holds.
        went = set(got.values.get("recent_recaps", "").split("\n"))
        shelf = view.shelf
        recapped = {p for p, line in zip(shelf.positions, shelf.lines, strict=True) if line in went}
        # A stepped message stands in by the recaps of every position it stands for (a
        # turn ST merged is two or more of them): its marks, when all those that have a
        # recap had it go in.
        spans, kept = stands_for(ident), set(shelf.positions)
        marks: set[str] = set()
        for i in stepped:
            held = [p for p in spans.get(i, ()) if p in kept]
            if held and all(p in recapped for p in held):
                marks.update(re.findall(r"\bu\d+x\b", messages[i].text))
        cutoff = view.cutoff if view.cutoff is not None else -1
        # What a failing check needs to be traced (the race it looks for is rare).
        player.traced[ident.chat_id] = (
            f"view: cutoff {view.cutoff}, through {view.covered_through}, running "
            f"v{view.running_version}, outdated {view.outdated}, lacking {list(view.lacking)}; "
            f"request: history {list(ident.history)} at {list(ident.positions)}, "
            f"drop {list(got.drop)}, stepped {stepped}, turns "
            f"{[(i, m.role, m.text[:24]) for i, m in enumerate(messages)]}"
        )
        player.covered[ident.chat_id] = (
            cutoff,
            frozenset(view.covered.raws),
            marks,
        )
        return got

    engine.request_memory = recorded  # type: ignore[method-assign,assignment]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The pinned seeds, each with its scenario; with `--hunt-seeds A-B`, those seeds
    instead, each with a scenario drawn from it (`tests/conftest.py` prints how to play a
    failing one again)."""
    if "scenario" not in metafunc.fixturenames:
        return
    hunted = metafunc.config.getoption("hunt_seeds")
    if hunted:
        seeds = [(seed, Scenario.drawn(seed)) for seed in hunted]
        metafunc.parametrize(("seed", "scenario"), seeds, ids=[f"hunt-{s}" for s, _ in seeds])
        return
    pinned = sorted(set(CONTEXT) | HUNTED)
    metafunc.parametrize(("seed", "scenario"), [(s, Scenario.pinned(s)) for s in pinned],
                         ids=[str(s) for s in pinned])  # fmt: skip


@pytest.mark.slow
# One worker plays the seeds one after the other (`--dist loadgroup`): two stories at once
# on a 2-core machine starve each other's background work, and each checks timing-borne
# invariants of the memory under a load no user's proxy sees.
@pytest.mark.xdist_group("random_story")
async def test_a_story_played_at_random_keeps_a_true_memory(
    memory_proxy: MemoryFactory,
    seed: int,
    scenario: Scenario,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = "always" if seed % 2 else "needed"
    settings = scenario.settings
    memory = await memory_proxy(2, ends=set(), **{"memory.message_recaps": policy, **settings})
    player = (GroupPlayer if scenario.group else Player)(memory, random.Random(seed))
    covering(memory, player, monkeypatch)
    player.wire, player.noted = scenario.wire, scenario.noted
    player.names, player.squash = scenario.names, scenario.squash
    player.reasoning, player.status = scenario.reasoning, scenario.status
    player.processed, player.quoting = scenario.processed, scenario.quoting
    if scenario.st_settings:
        settings_file = memory.story.path.parents[2] / "settings.json"
        save_like_st(settings_file, json.dumps(st_settings(player.wire)).encode())
        library = memory.app[RUNTIME].memory_parts().library
        await memory.until(lambda db: bool(library.prompt_formats()))
    player.add(False)
    player.save()
    await player.until_read(player.folder / f"{player.name}.jsonl")
    caplog.set_level(logging.WARNING, logger="proxy")
    for _ in range(STEPS):
        await player.step(scenario.context)
    # The user's next message, once the memory has caught up with the chat as it is.
    player.add(True)
    player.save()
    await player.request(player.messages, scenario.context)
    await player.until_read(player.folder / f"{player.name}.jsonl")
    try:
        await asyncio.wait_for(memory.engine.settle(), 30)
    except TimeoutError:
        queue = await (await memory.client.get("/recap/api/queue")).json()
        waiting = [j for j in queue["jobs"] if j["state"] != "done"]
        pytest.fail(f"the queue never settled: {waiting}; {player.done}")

    hidden_read = settings.get("memory.include_hidden_messages", True)
    found = await memory.run(lambda db: problems(player, db, hidden_read))
    for name in sorted(player.used - {player.name}):  # the chats the user left
        other = copy.copy(player)
        other.name, (other.messages, other.metadata) = name, player.others[name]
        left = await memory.run(partial(problems, other, hidden_read=hidden_read))
        found += [f"{name}: {problem}" for problem in left]
    assert not found, "\n".join([*found, f"steps: {player.done}"])
    assert not player.kinds, "\n".join(player.kinds)
    # Strings: pytest shortens any other message to a line, and these are what a hunt
    # that found a rare failure has to go on.
    assert not player.lost, "\n".join(player.lost)
    noted = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noted, noted


def test_the_hunt_takes_ranges_single_seeds_and_lists() -> None:
    assert seed_list("7501-7503") == [7501, 7502, 7503]
    assert seed_list("42") == [42]
    assert seed_list("4514,4533, 10-11,4514") == [4514, 4533, 10, 11]
    for bad in ("a-b", "1,,2", "9-3"):
        with pytest.raises(pytest.UsageError):
            seed_list(bad)
