"""Memory for a long story, end to end: a generated chat backfilled through `serve`, then
asked about facts planted in early, middle and late scenes. Prints figures; not a test.

    python bench/long_story.py [--messages 1200] [--scale 10000]

The story has a scene every 20 messages (its last character message carries
`[END SCENE]`), and a fact planted in every third scene ("Ava hid the Amber Lantern under
the Weeping Bridge."). `recap-proxy serve` runs in its own process over a temp ST data
folder, against the fake model in another (`tests/fakes/fake_llm.py`), which behaves as a
model does on a long story: its scene recaps keep the scene's named things, its running
recap grows by a scene each fold whatever the budget, its condenser keeps only the newest
lines, and an answer past `max_tokens` is cut off with `finish_reason: "length"`. The chat
is built with `recap-proxy backfill` (its progress bar goes to stderr); then, for each
fact, the user's next message asks about it (saved first, as ST does) and the request is
previewed through the proxy.

A character, Brother Aldric, gets a fact in an early, a middle and a late scene (the fake
model lists a scene's entities from `[[Name: fact]]` marks, as a real one lists the named
people it reads about): a question that names him must bring all three facts in his card,
and the questions about the hidden things, which do not name him, must carry no card of
his.

Printed: scenes found, failed jobs, whether every closed scene is folded in, recall (asked
facts whose text reached the model in the inserted memory, not in the chat history), the
entity case, the largest inserted memory, upkeep calls and prompt tokens per 100 messages,
backfill wall time, and the chat path's relevance selection (search and choice) over 500
scenes. With `--scale N`, a second chat of N messages is backfilled too (calls and wall
time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench.overhead import free_port, start, stop  # noqa: E402
from bench.words import chat_file, st_message  # noqa: E402
from proxy.core.models import ChatMessage  # noqa: E402
from proxy.core.recall import HEADING as SCENES  # noqa: E402
from proxy.core.recall import SceneCard, Vocabulary, pick_scenes, render_scenes, words_of  # noqa: E402
from proxy.core.tokens import TokenCounter  # noqa: E402
from proxy.core.vectors import fuse, stacked, unit  # noqa: E402
from proxy.memory.views.recall import rank_scenes  # noqa: E402
from proxy.memory.views.view import MemoryView  # noqa: E402
from proxy.settings.memory import MemorySettings  # noqa: E402
from proxy.sillytavern.chatfile import STMessage  # noqa: E402
from proxy.sillytavern.reconcile import Event  # noqa: E402
from proxy.store import ChatRecord, Database  # noqa: E402
from proxy.store.search import SceneSearch  # noqa: E402
from tests.fakes.fake_embed import CONCEPTS  # noqa: E402
from tests.fakes.fake_llm import END_SCENE  # noqa: E402
from tests.st_data import save_like_st  # noqa: E402

CHAR, USER = "Ava", "Tom"
SCENE_LENGTH = 20
FILLER = (  # noqa: SIM905 (a word list reads better as text)
    "forest path night fire wind rain morning road village stone river bridge tower gate "
    "wall door window lantern rope blade cloak boots map coin letter song story ale bread "
    "horse cart dog crow wolf deer oak pine moss fog snow ice smoke ash dust light shadow "
    "quiet slow tired warm cold wet dark bright old young long short heavy soft rough "
    "walk talk listen watch wait rest climb cross follow lead carry drop open close laugh "
    "smile frown sigh shrug nod whisper shout sing pray dream remember forget promise"
).split()
PLACES = ("Mill Hollow", "Crow Tower", "Saltmarsh", "the Greyford", "Ember Hill", "Thornwick")
# 24 of each: every fact names a thing and a spot no other fact names.
ADJECTIVES = (  # noqa: SIM905 (a word list reads better as text)
    "Amber Brass Cobalt Ivory Jade Obsidian Scarlet Copper Silver Onyx Crimson Golden Azure "
    "Pewter Violet Bronze Emerald Sable Russet Pearl Umber Ashen Coral Frost"
).split()
THINGS = (  # noqa: SIM905 (a word list reads better as text)
    "Lantern Key Compass Locket Dagger Chalice Mask Ring Map Horn Seal Crown Mirror Flute "
    "Feather Coin Scroll Bell Idol Shield Torc Quill Sextant Astrolabe"
).split()
SPOTS = (  # noqa: SIM905 (a word list reads better as text)
    "Weeping Bridge,Old Well,Hollow Oak,Chapel Ruin,Salt Cellar,Toll House,Miller's Loft,"
    "Fox Den,Bell Tower,Drowned Barn,Stone Circle,Ferry Post,Rook Nest,Cider Press,Lime Kiln,"
    "Tanner's Yard,Shrine Steps,Hay Loft,Pike Pond,Watch Cairn,Grain Store,Smithy Vault,"
    "Boat Shed,Peat Bank"
).split(",")


# What a question calls each hidden thing instead: the fake embeddings' synonyms
# (`tests/fakes/fake_embed.py`), so that it shares no content word with the fact.
SYNONYMS = {group[0]: group[1] for group in CONCEPTS if group[0].title() in THINGS}
STAYS = {"tom", "stops", "at", "the", "crossroads", "where", "did", "you", "it"}


def paraphrase(thing: str) -> str:
    """A question about a hidden thing in other words: 'the lamp' for the Amber Lantern."""
    noun = thing.split()[-1].lower()
    return f"Tom stops at the crossroads. Where did you stash the {SYNONYMS[noun]}?"


def chat_id(char: str) -> str:
    return f"default-user/chats/{char}/{char} - 2026-11-22@10h00m00s"


ENTITY = "Brother Aldric"
ENTITY_FACTS = (
    "keeps the guild ledger in the chapel",
    "was exiled to Saltmarsh for the missing silver",
    "came back as the ferryman of the Greyford",
)


def entity_scenes(n: int) -> tuple[int, int, int]:
    """The scenes of Brother Aldric's three facts: early, middle, late (all closed)."""
    last = n // SCENE_LENGTH - 1
    return 1, last // 2, last - 2


def story(n: int, seed: int = 11) -> tuple[list[dict[str, Any]], list[tuple[int, str, str]]]:
    """n messages (ending with the user's), and the facts: (scene, fact sentence, thing)."""
    rng = random.Random(seed)
    aldric = dict(zip(entity_scenes(n), ENTITY_FACTS, strict=True))
    messages: list[dict[str, Any]] = []
    facts: list[tuple[int, str, str]] = []
    for i in range(n):
        is_user = bool(i % 2)
        scene = i // SCENE_LENGTH
        words = rng.randint(12, 30) if is_user else rng.randint(50, 110)
        text = " ".join(rng.choice(FILLER) for _ in range(words)).capitalize() + "."
        if not is_user:
            # What happens: a named place, as every scene has (what recaps are made of).
            text += f" {CHAR} and {USER} {rng.choice(FILLER)} near {rng.choice(PLACES)}."
        if not is_user and scene % 3 == 0 and i % SCENE_LENGTH == 4:
            n_fact = len(facts)
            thing = f"{ADJECTIVES[n_fact % 24]} {THINGS[(n_fact * 7) % 24]}"
            fact = f"{CHAR} hid the {thing} under the {SPOTS[(n_fact * 5) % 24]}."
            facts.append((scene, fact, thing))
            text += " " + fact
        if not is_user and i % SCENE_LENGTH == 6 and scene in aldric:
            text += f" {ENTITY} passes by. [[{ENTITY}: {aldric[scene]}]]"
        if not is_user and i % SCENE_LENGTH == SCENE_LENGTH - 2:
            text += f" They part ways at the gate. {END_SCENE}"
        messages.append(st_message(i, USER if is_user else CHAR, is_user, text))
    return messages, facts


def save(path: Path, char: str, messages: list[dict[str, Any]]) -> None:
    save_like_st(path, chat_file(messages, USER, char, integrity=char))


def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    system = [
        {"role": "system", "content": f"You are {CHAR}, a ranger. Stay in character."},
        {"role": "system", "content": "[Start a new Chat]"},
    ]
    history = [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in messages
    ]
    return {"model": "fake-model", "messages": system + history}


class Serve:
    """`recap-proxy serve` in its own process, and the calls a user makes to it."""

    def __init__(self, tmp: Path, llm_url: str, *, embeddings: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = tmp / "data"
        (self.data / "default-user" / "chats").mkdir(parents=True)
        config = tmp / "config.toml"
        config.write_text(
            f"""
[server]
port = {self.port}
log_level = "warning"
[upstream]
base_url = "{llm_url}"
[sillytavern]
data_dir = "{self.data}"
debounce_ms = 20
[store]
path = "{tmp / "store.sqlite3"}"
[memory]
templates_dir = "{tmp / "no-templates"}"
[memory.llm]
model = "fake-model"
"""
            + (f'[memory.embeddings]\nbase_url = "{llm_url}"\n' if embeddings else "")
        )
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Serve:
        self.proc = start(["-m", "proxy", "serve", "--config", str(self.config)], self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop(self.proc)

    def backfill(self, chat: str) -> float:
        """`recap-proxy backfill` as a user runs it; its wall time."""
        began = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [sys.executable, "-m", "proxy", "backfill", "--config", str(self.config), chat],
            cwd=ROOT,
            env=env,
            check=False,
        )
        return time.perf_counter() - began


async def wait_indexed(session: aiohttp.ClientSession, url: str, chat: str, total: int) -> None:
    for _ in range(2000):
        async with session.get(f"{url}/recap/api/chats") as r:
            if r.status == 200:
                chats = await r.json()
                if any(c["id"] == chat and c["messages"] == total for c in chats):
                    return
            elif r.status != 503:  # 503: the data folder is not indexed yet
                raise RuntimeError(f"listing chats: {r.status} {await r.text()}")
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{chat} was never indexed with {total} messages")


async def memory_state(session: aiohttp.ClientSession, url: str, chat: str) -> dict[str, Any]:
    base = f"{url}/recap/api/chats/{quote(chat, safe='')}"
    async with session.get(f"{base}/memory") as r:
        overview = await r.json()
    async with session.get(f"{base}/scenes") as r:
        scenes = await r.json()
    async with session.get(f"{url}/recap/api/queue?chat={quote(chat, safe='')}") as r:
        jobs = (await r.json())["jobs"]
    return {"overview": overview, "scenes": scenes, "jobs": jobs}


async def stats(session: aiohttp.ClientSession, llm_url: str) -> dict[str, dict[str, int]]:
    async with session.get(llm_url.removesuffix("/v1") + "/_fake/stats") as r:
        result: dict[str, dict[str, int]] = await r.json()
        return result


def usage_since(after: dict[str, Any], before: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {
        op: (
            v["calls"] - before.get(op, {}).get("calls", 0),
            v["prompt_tokens"] - before.get(op, {}).get("prompt_tokens", 0),
        )
        for op, v in after.items()
    }


async def backfilled(
    session: aiohttp.ClientSession, serve: Serve, llm_url: str, char: str, n: int
) -> tuple[float, dict[str, tuple[int, int]], dict[str, Any]]:
    """`recap-proxy backfill` of a character's chat once it is indexed: its wall time, the
    calls it made, and the memory it left."""
    chat = chat_id(char)
    await wait_indexed(session, serve.url, chat, n)
    before = await stats(session, llm_url)
    wall = await asyncio.to_thread(serve.backfill, char)
    used = usage_since(await stats(session, llm_url), before)
    return wall, used, await memory_state(session, serve.url, chat)


async def long_story(serve: Serve, llm_url: str, n: int) -> dict[str, Any]:
    messages, facts = story(n)
    chat = chat_id(CHAR)
    path = serve.data / f"{chat}.jsonl"
    save(path, CHAR, messages)
    counter = TokenCounter()
    async with aiohttp.ClientSession() as session:
        first = await stats(session, llm_url)
        wall, used, state = await backfilled(session, serve, llm_url, CHAR, n)
        # Ask about facts from early, middle and late scenes, as the user's next message.
        asked, recalled, stray, inserted = 0, 0, 0, []
        closed = [f for f in facts if f[0] < n // SCENE_LENGTH - 1]
        for _, fact, thing in closed:
            question = f"Tom stops at the crossroads. Do you still have the {thing}? Where is it?"
            messages[-1]["mes"] = messages[-1]["swipes"][0] = question
            save(path, CHAR, messages)
            await asyncio.sleep(0.1)  # the watcher's debounce; planning follows the edit
            async with session.post(f"{serve.url}/recap/api/preview", json=request(messages)) as r:
                preview = await r.json()
            injected = (preview["injected"] or {}).get("text", "")
            sent = preview["body"]["messages"]
            # The memory's parts are messages of their own; the rest is the chat history.
            parts = {part["text"] for part in preview["parts"]}
            history = " ".join(m["content"] for m in sent if m["content"] not in parts)
            inserted.append(counter.count(injected) if injected else 0)
            asked += 1
            # The fact itself, not the question's words: "Amber Lantern under the Weeping Bridge".
            core = fact.removeprefix(f"{CHAR} hid the ").removesuffix(".")
            if core in injected and core not in history:
                recalled += 1
            elif os.environ.get("BENCH_DEBUG"):
                print(f"\nnot recalled: {fact}\n{injected}\n", file=sys.stderr)
            if f"- {ENTITY} (" in injected:
                stray += 1
        # The entity case: a question that names him.
        question = f"Tom looks toward the river. What became of {ENTITY}, do you know?"
        messages[-1]["mes"] = messages[-1]["swipes"][0] = question
        save(path, CHAR, messages)
        await asyncio.sleep(0.1)
        async with session.post(f"{serve.url}/recap/api/preview", json=request(messages)) as r:
            preview = await r.json()
        injected = (preview["injected"] or {}).get("text", "")
        card = next(
            (line for line in injected.splitlines() if line.startswith(f"- {ENTITY} (")), ""
        )
        named = [fact for fact in ENTITY_FACTS if fact in card]
        if os.environ.get("BENCH_DEBUG") and len(named) < len(ENTITY_FACTS):
            print(f"\nentity card: {card!r}\n{injected}\n", file=sys.stderr)
        meant = await paraphrased(session, serve, path, messages, closed)
        calls = {op: c for op, (c, _) in usage_since(await stats(session, llm_url), first).items()}
    scenes = state["scenes"]
    running = state["overview"]["running_recap"]
    return {
        "messages": n,
        "scenes_written": n // SCENE_LENGTH,
        "scenes": len(scenes),
        "failed": sum(1 for j in state["jobs"] if j["state"] == "failed"),
        "folded": running is not None and running["new_scene_index"] == scenes[-1]["index"],
        "running_tokens": counter.count(running["content"]) if running else 0,
        "recall": (recalled, asked),
        "meant": meant,
        "calls": calls,
        "entity": (len(named), counter.count(card) if card else 0, stray),
        "entity_inserted": counter.count(injected) if injected else 0,
        "inserted_max": max(inserted, default=0),
        "used": used,
        "wall": wall,
    }


async def paraphrased(
    session: aiohttp.ClientSession,
    serve: Serve,
    path: Path,
    messages: list[dict[str, Any]],
    closed: list[tuple[int, str, str]],
) -> tuple[int, int, int, int]:
    """Every closed fact asked once in words that share none with it, each saved 30 ms
    before its request (ST's save-to-request gap): how many came back among the recalled
    scenes, of how many; and how many requests found the question's vector ready, and how
    many did not (`/health`)."""
    before = await health_questions(session, serve.url)
    recalled = 0
    for _, fact, thing in closed:
        question = paraphrase(thing)
        shared = (set(question.lower().strip("?.").split()) - STAYS) & set(fact.lower().split())
        assert not shared, f"{question!r} shares {shared} with {fact!r}"
        messages[-1]["mes"] = messages[-1]["swipes"][0] = question
        save(path, CHAR, messages)
        await asyncio.sleep(0.03)
        async with session.post(f"{serve.url}/recap/api/preview", json=request(messages)) as r:
            preview = await r.json()
        injected = (preview["injected"] or {}).get("text", "")
        scenes = injected.split(SCENES, 1)[1] if SCENES in injected else ""
        core = fact.removeprefix(f"{CHAR} hid the ").removesuffix(".")
        recalled += core in scenes
        if os.environ.get("BENCH_DEBUG") and core not in scenes:
            print(f"\nnot recalled by meaning: {question} ({fact})\n{scenes}\n", file=sys.stderr)
    after = await health_questions(session, serve.url)
    return recalled, len(closed), after[0] - before[0], after[1] - before[1]


async def health_questions(session: aiohttp.ClientSession, url: str) -> tuple[int, int]:
    async with session.get(f"{url}/health") as r:
        embeddings = (await r.json())["embeddings"]
    return embeddings.get("questions_ready", 0), embeddings.get("questions_not_ready", 0)


async def scale(serve: Serve, llm_url: str, n: int) -> dict[str, Any]:
    char = "Mira"
    messages, _ = story(n, seed=5)
    for m in messages:
        if not m["is_user"]:
            m["name"] = char
    chat = chat_id(char)
    save(serve.data / f"{chat}.jsonl", char, messages)
    async with aiohttp.ClientSession() as session:
        wall, used, state = await backfilled(session, serve, llm_url, char, n)
    running = state["overview"]["running_recap"]
    scenes = state["scenes"]
    return {
        "messages": n,
        "scenes": len(scenes),
        "failed": sum(1 for j in state["jobs"] if j["state"] == "failed"),
        "folded": running is not None and running["new_scene_index"] == scenes[-1]["index"],
        "used": used,
        "wall": wall,
    }


def zipf_words(rng: random.Random, count: int, vocabulary: int = 5000) -> list[str]:
    """Words drawn as in natural text (Zipf): a few very common, most rare."""
    weights = [1 / (k + 1) for k in range(vocabulary)]
    picks = rng.choices(range(vocabulary), weights=weights, k=count)
    return [f"{FILLER[k % len(FILLER)]}{k // len(FILLER)}" for k in picks]


DIMS = 384


def selection(scenes: int = 500, rounds: int = 2000) -> tuple[float, float]:
    """p50 and p95 (ms) of the chat path's relevance selection over a chat of `scenes`
    scenes (recaps of 150 words from a 5,000-word vocabulary of natural frequencies):
    search terms, the bm25 queries, the scenes nearest the question's vector (384
    dimensions) fused with them, the choice within budget, the text."""
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite3"
        db = Database(path, time.time)
        chat = "default-user/chats/Ava/big"
        record = ChatRecord(
            chat, "default-user", "character", "Ava", None, None, "big", f"{chat}.jsonl",
            None, None, None, 0, 0, None, 0, 0, None, False,
        )  # fmt: skip
        mes = [STMessage(name=CHAR, mes=f"m{i}") for i in range(scenes)]
        db.save_chat(record, [None] * scenes, [b"%d" % i for i in range(scenes)], mes.__getitem__,
                     [Event("added", i) for i in range(scenes)])  # fmt: skip
        counter = TokenCounter()
        cards: dict[int, SceneCard] = {}
        for position, m in enumerate(db.messages(chat)):
            recap = " ".join(zipf_words(rng, 150)) + (
                f" {CHAR} hid the {rng.choice(ADJECTIVES)} {rng.choice(THINGS)} near "
                f"{rng.choice(PLACES)}."
            )
            db.memory.set_break(chat, m.uid, "auto", 0.0)
            db.memory.add_scene_recap(chat, m.uid, recap, 0.0, scene_name=f"Scene {position}",
                                      source="llm")  # fmt: skip
            cards[m.uid] = SceneCard(m.uid, position, f"Scene {position}", recap,
                                     counter.count(recap), words_of(recap))  # fmt: skip
        db.memory.optimize_search()  # as planning does after a chat's scenes change
        # Vectors of a typical small embedding model's size (bge-small, e5-small: 384).
        vectors = stacked(list(cards), [unit([rng.random() for _ in range(DIMS)]) for _ in cards])
        view = MemoryView(
            scenes=cards,
            names=(CHAR, USER),
            vocabulary=Vocabulary.of(c.words for c in cards.values()),
        )
        settings = MemorySettings()
        search = SceneSearch(path)
        times = []
        for i in range(rounds):
            texts = [" ".join(zipf_words(rng, 60)) for _ in range(3)]
            question = f"Where is the {rng.choice(ADJECTIVES)} {rng.choice(THINGS)}, {CHAR}?"
            roles = ["assistant", "user", "assistant", "user"]  # the question is the user's
            messages = [ChatMessage(r, t) for r, t in zip(roles, [*texts, question], strict=True)]
            recent = messages[-settings.relevant_scenes_context :]
            meant = unit([rng.gauss(0, 1) for _ in range(DIMS)])  # the question's vector
            began = time.perf_counter()
            asked, context = rank_scenes(search, view, chat, recent)
            ranked = fuse([asked, vectors.nearest(meant, 24, 0.0)])
            ranked += [uid for uid in context if uid not in ranked]
            render_scenes(pick_scenes(ranked, cards, scenes - 10, 800))
            times.append(time.perf_counter() - began)
            if i == 0:
                times.clear()  # the first query opens the connection
        search.close()
        db.close()
    times.sort()
    return 1000 * statistics.median(times), 1000 * times[int(len(times) * 0.95)]


def report_usage(n: int, used: dict[str, tuple[int, int]]) -> None:
    per = 100 / n
    calls = sum(c for c, _ in used.values())
    tokens = sum(t for _, t in used.values())
    print(f"upkeep: {calls} calls ({calls / n:.3f} per message), {calls * per:.1f} calls and "
          f"{tokens * per:,.0f} prompt tokens per 100 messages")  # fmt: skip
    for op, (c, t) in sorted(used.items()):
        print(f"  {op:<23} {c:5d} calls  {t * per:>9,.0f} prompt tokens per 100 messages")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1200)
    parser.add_argument("--scale", type=int, default=0, help="also backfill a chat this long")
    args = parser.parse_args()
    port = free_port()
    fake = start(["-m", "tests.fakes.fake_llm", "--port", str(port)], port)
    llm_url = f"http://127.0.0.1:{port}/v1"
    try:
        with tempfile.TemporaryDirectory() as tmp, Serve(Path(tmp), llm_url) as serve:
            result = await long_story(serve, llm_url, args.messages)
            big = await scale(serve, llm_url, args.scale) if args.scale else None
        # The same story again, recalled by meaning too (the fake's embeddings).
        with (
            tempfile.TemporaryDirectory() as tmp,
            Serve(Path(tmp), llm_url, embeddings=True) as serve,
        ):
            meaning = await long_story(serve, llm_url, args.messages)
    finally:
        fake.terminate()
    n = result["messages"]
    recalled, asked = result["recall"]
    print(f"\n== long story: {n} messages, {result['scenes_written']} scenes written")
    print(f"scenes found: {result['scenes']}; failed jobs: {result['failed']}; every closed "
          f"scene folded in: {'yes' if result['folded'] else 'NO'}")  # fmt: skip
    print(f"running recap: {result['running_tokens']} tokens (budget 1200)")
    print(f"recall: {recalled}/{asked} asked facts in the inserted memory "
          f"({100 * recalled / max(1, asked):.0f} %); largest inserted memory "
          f"{result['inserted_max']} tokens (budget 2500)")  # fmt: skip
    found, card_tokens, stray = result["entity"]
    early, middle, late = entity_scenes(n)
    print(f"entity: {found}/{len(ENTITY_FACTS)} of {ENTITY}'s facts (scenes {early}, {middle}, "
          f"{late}) in his card ({card_tokens} tokens; inserted memory "
          f"{result['entity_inserted']} tokens) when the last message names him; his card "
          f"in {stray} of {asked} requests that do not name him")  # fmt: skip
    report_usage(n, result["used"])
    print(f"backfill wall time: {result['wall']:.1f} s")
    words, asked_meant, _, _ = result["meant"]
    hybrid, _, ready, not_ready = meaning["meant"]
    embeds = meaning["calls"].get("embed", 0)
    print(f"\n== recall by meaning: each of the {asked_meant} facts asked in words it shares "
          f"none with (\"Where did you stash the lamp?\")")  # fmt: skip
    print(f"full-text search alone: {words}/{asked_meant} ({100 * words / asked_meant:.0f} %); "
          f"hybrid with embeddings: {hybrid}/{asked_meant} "
          f"({100 * hybrid / asked_meant:.0f} %)")  # fmt: skip
    print(f"the question's vector ready when the request came (30 ms after ST's save): "
          f"{ready} of {ready + not_ready}")  # fmt: skip
    questions = meaning["recall"][1] + 1 + asked_meant  # by words, the entity's, by meaning
    by_words = "/".join(map(str, meaning["recall"]))
    print(f"embedding calls: {embeds}: {embeds - questions} for the scene recaps and entity "
          f"cards of the backfill (batched), and one per question asked ({questions}); in a "
          f"chat, one per user message saved: 50 per 100 messages. Recall of the facts "
          f"asked by their words, with embeddings on: {by_words}")  # fmt: skip
    p50, p95 = selection()
    print(f"relevance selection on the chat path, 500 scenes: p50 {p50:.3f} ms, p95 {p95:.3f} ms")
    if big is not None:
        folded = "yes" if big["folded"] else "NO"
        print(
            f"\n== backfill at scale: {big['messages']} messages, {big['scenes']} scenes "
            f"found, {big['failed']} failed jobs, every closed scene folded in: {folded}"
        )
        report_usage(big["messages"], big["used"])
        print(f"backfill wall time: {big['wall']:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
