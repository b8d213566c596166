"""`recap-proxy eval`: how well the memory works on your own model.

It writes a made-up story (`proxy.cli.eval_story`) as an ST chat into a folder of its own,
serves it on loopback exactly as `serve` would (its own store, your settings), has the
memory built with the memory LLM (the configured one, or `--upstream`, `--model`,
`--api-key`), then asks about each planted fact as the user's next message and looks for
the fact in the memory the proxy would insert. It reports recall, scene breaks found
against the true ones, failed and refused answers and why, calls and tokens per
operation, wall time, and the cost per 1,000 chat messages in calls and tokens.
Nothing of yours is read but the settings, nothing is written outside a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from proxy.cli.eval_story import CHAR, EvalStory, chat_file, eval_story
from proxy.core.guard import KEY_HEADER
from proxy.errors import ConfigError
from proxy.memory.engine import MemoryEngine
from proxy.runtime.runtime import build_runtime
from proxy.settings import Settings, load_settings
from proxy.store import Database, Store
from proxy.web import make_app

CHAT_ID = f"default-user/chats/{CHAR}/{CHAR} - eval"
POLL_SECONDS = 0.25
SYSTEM = f"You are {CHAR}, a ranger travelling with Tom. Stay in character."


def add_eval_command(sub: Any, config_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("eval", help="test how well the memory works on your model")
    config_arg(p)
    p.add_argument("--upstream", metavar="URL", help="the memory LLM's OpenAI-compatible URL")
    p.add_argument("--model", help="the memory LLM's model name")
    p.add_argument("--api-key", metavar="KEY", help="the memory LLM's key")
    p.add_argument("--messages", type=int, default=300, help="the story's length (300)")
    p.add_argument("--scenes", type=int, default=10, help="its scenes (10)")
    p.add_argument("--seed", type=int, default=7, help="which story of that size (7)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def eval_settings(args: argparse.Namespace, folder: Path) -> Settings:
    """The user's settings, the memory LLM as given, over a folder and store of its own."""
    base = load_settings(args.config)
    llm = base.memory.llm
    model = args.model or llm.model
    if not model:
        raise ConfigError("eval needs the memory LLM's model: --model NAME, or [memory.llm] model")
    upstream = args.upstream or llm.base_url or base.upstream.base_url
    key = args.api_key or (llm.api_key or base.upstream.api_key)
    secret = key if isinstance(key, str) or key is None else key.get_secret_value()
    overrides: dict[str, Any] = {
        "sillytavern.data_dir": str(folder / "data"),
        "store.path": str(folder / "store.sqlite3"),
        "server.host": "127.0.0.1",
        "server.record_dir": None,
        "memory.llm.base_url": upstream,
        "memory.llm.model": model,
        "memory.llm.api_key": secret,
        "memory.enabled": True,
        # A failed call is tried again as serve does, but after a second or so rather than
        # serve's minutes: a model that keeps failing is told in seconds.
        "queue.backoff_seconds": min(base.queue.backoff_seconds, 1.0),
        "queue.backoff_cap_seconds": min(base.queue.backoff_cap_seconds, 4.0),
    }
    return load_settings(args.config, overrides=overrides)


async def run_eval(args: argparse.Namespace) -> int:
    if args.scenes < 2 or args.messages < args.scenes * 4:
        raise ConfigError("--messages must give each of --scenes (at least 2) 4 messages")
    story = eval_story(args.messages, args.scenes, args.seed)
    with tempfile.TemporaryDirectory(prefix="recap-proxy-eval-") as tmp:
        folder = Path(tmp)
        settings = eval_settings(args, folder)
        path = folder / "data" / f"{CHAT_ID}.jsonl"
        path.parent.mkdir(parents=True)
        save_as_st_does(path, chat_file(story))
        report = await _evaluate(settings, story, path)
    print(json.dumps(report, indent=2) if args.json else _summary(report))
    return 0 if report["failed"] == 0 else 1


async def _evaluate(settings: Settings, story: EvalStory, path: Path) -> dict[str, Any]:
    began = time.monotonic()
    runtime = build_runtime(settings)
    memory = runtime.memory_parts()
    runner = web.AppRunner(make_app(runtime), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    key = settings.server.access_key
    headers = {KEY_HEADER: key.get_secret_value()} if key else {}
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", headers=headers) as http:
            await asyncio.wait_for(memory.library.indexed.wait(), 60)
            chat = quote(CHAT_ID, safe="")
            async with http.post(f"/recap/api/chats/{chat}/backfill", json={}) as answer:
                answer.raise_for_status()
            store = memory.store
            await _until_idle(memory.engine, store)
            built = time.monotonic() - began
            asked = [await _asked(http, store, story, i, path) for i in range(len(story.facts))]
            state = await store.call(_state)
    finally:
        await runner.cleanup()
    return _report(story, state, asked, built, time.monotonic() - began)


def save_as_st_does(path: Path, data: bytes) -> None:
    """Write the chat file as ST does (write-file-atomic): a temp file beside it, renamed
    over it. Written in place, the watcher may read it half-written, and a file cut short
    reads as its newest messages deleted (their scene breaks and recaps with them)."""
    tmp = path.with_name(f"{path.name}.{time.time_ns()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


async def _until_idle(engine: MemoryEngine, store: Store) -> None:
    """Until planning and the queue have nothing left to do, drawing progress meanwhile."""
    settled = asyncio.create_task(engine.settle())
    while not settled.done():
        await asyncio.wait({settled}, timeout=POLL_SECONDS)
        jobs = await store.call(lambda db: db.jobs.list(CHAT_ID))
        live = sum(1 for j in jobs if j.state in ("queued", "running"))
        done = sum(1 for j in jobs if j.state == "done")
        failed = sum(1 for j in jobs if j.state == "failed")
        print(f"\reval: {done} job(s) done, {failed} failed, {live} to go  ", end="",
              file=sys.stderr, flush=True)  # fmt: skip
    await settled
    print(file=sys.stderr)


async def _asked(
    http: aiohttp.ClientSession, store: Store, story: EvalStory, index: int, path: Path
) -> tuple[bool, int]:
    """Whether the memory the proxy would insert, asked about a fact as the user's next
    message, holds each of its words; and how many of the chat's messages it left out."""
    fact = story.facts[index]
    messages = [dict(m) for m in story.messages]
    messages[-1] = {**messages[-1], "mes": fact.question, "swipes": [fact.question]}
    asked = EvalStory(messages, story.facts, story.breaks)
    await asyncio.to_thread(save_as_st_does, path, chat_file(asked))  # saved first, as ST
    # Read by the proxy before the request comes (as ST's save is, long before its
    # request on a loaded machine): what is measured is the memory, not a race.
    await _until_read(store, fact.question)
    history = [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in messages
    ]
    body = {"model": "eval", "messages": [{"role": "system", "content": SYSTEM}, *history]}
    async with http.post("/recap/api/preview", json=body) as answer:
        answer.raise_for_status()
        preview = await answer.json()
    injected = str((preview.get("injected") or {}).get("text", "")).lower()
    return all(term.lower() in injected for term in fact.terms), len(preview["left_out"])


async def _until_read(store: Store, text: str) -> None:
    def newest(db: Database) -> str:
        found = db.messages(CHAT_ID)
        return found[-1].message.mes if found else ""

    async with asyncio.timeout(60):
        # Polled: what the store holds is the condition, read on the store's thread.
        while await store.call(newest) != text:  # noqa: ASYNC110
            await asyncio.sleep(POLL_SECONDS / 5)


def _state(db: Database) -> dict[str, Any]:
    breaks = [b.position for b in db.memory.breaks(CHAT_ID) if b.visible]
    jobs = db.jobs.list(CHAT_ID)
    rows = db.db.execute(
        "SELECT operation, SUM(calls), SUM(prompt_tokens), SUM(answer_tokens) FROM usage "
        "WHERE chat_id = ? GROUP BY operation",
        (CHAT_ID,),
    ).fetchall()
    calls = {op: {"calls": c, "prompt_tokens": p, "completion_tokens": a} for op, c, p, a in rows}
    failures = [f"{j.operation}: {j.error}" for j in jobs if j.state == "failed"]
    memory = db.memory
    stored = {
        "message_recaps": len(memory.message_recaps(CHAT_ID)),
        "scene_recaps": sum(len(memory.scene_recaps(b.uid)) for b in memory.breaks(CHAT_ID)),
        "running_recaps": len(memory.running_recaps(CHAT_ID)),
    }
    entities = [f"{e.name} ({e.type}, {len(e.facts)} facts)" for e in db.entities.registry(CHAT_ID)]
    stored["entities"] = len(entities)
    return {"breaks": breaks, "calls": calls, "failures": failures, "stored": stored,
            "entities": entities}  # fmt: skip


def _report(
    story: EvalStory,
    state: dict[str, Any],
    asked: list[tuple[bool, int]],
    built: float,
    wall: float,
) -> dict[str, Any]:
    recalled = [hit for hit, _ in asked]
    calls = state["calls"]
    total = {k: sum(op[k] for op in calls.values()) for k in
             ("calls", "prompt_tokens", "completion_tokens")}  # fmt: skip
    per = 1000 / len(story.messages)
    return {
        "recall": round(sum(recalled) / len(recalled), 3) if recalled else 0.0,
        "facts": [
            {"scene": f.scene, "kind": f.kind, "fact": f.sentence, "recalled": hit}
            for f, hit in zip(story.facts, recalled, strict=True)
        ],
        "breaks_found": len(set(state["breaks"]) & set(story.breaks)),
        "breaks_true": len(story.breaks),
        "breaks_other": sorted(set(state["breaks"]) - set(story.breaks)),
        "failed": len(state["failures"]),
        "failures": state["failures"],
        # What the memory kept, and the most chat messages a request left out for it.
        "stored": state["stored"],
        "entities": state["entities"],
        "left_out_max": max((n for _, n in asked), default=0),
        "calls": calls,
        "prompt_tokens": total["prompt_tokens"],
        "completion_tokens": total["completion_tokens"],
        "per_1000_messages": {k: round(v * per) for k, v in total.items()},
        "seconds": round(wall, 1),
        "build_seconds": round(built, 1),
        "messages": len(story.messages),
    }


def _summary(report: dict[str, Any]) -> str:
    facts = report["facts"]
    lines = [
        f"recall: {sum(f['recalled'] for f in facts)} of {len(facts)} facts in the inserted "
        f"memory ({report['recall']:.0%})",
        *(
            f"  {'yes' if f['recalled'] else 'NO '} scene {f['scene']} ({f['kind']}): {f['fact']}"
            for f in facts
        ),
        f"scene breaks: {report['breaks_found']} of {report['breaks_true']} found"
        + (f", {len(report['breaks_other'])} elsewhere" if report["breaks_other"] else ""),
        f"failed jobs: {report['failed']}",
        "stored: {message_recaps} message recaps, {scene_recaps} scene recaps, "
        "{running_recaps} running recap versions, {entities} entities".format(**report["stored"])
        + f"; a request left out at most {report['left_out_max']} chat messages for them",
        *(f"  {failure}" for failure in report["failures"][:10]),
        "calls: " + ", ".join(f"{op} {c['calls']}" for op, c in sorted(report["calls"].items())),
        f"tokens: {report['prompt_tokens']} prompt, {report['completion_tokens']} answer",
        "per 1,000 chat messages: {calls} calls, {prompt_tokens} prompt and "
        "{completion_tokens} answer tokens".format(**report["per_1000_messages"]),
        f"wall time: {report['seconds']} s ({report['build_seconds']} s building the memory)",
    ]
    if report["recall"] < 0.5 or report["failed"]:
        lines.append(
            "low recall or failed jobs: give the memory's calls a bigger model ([memory.llm] "
            "base_url and model, or per operation in [memory.llm.operations]); the failures "
            "above say what the model did"
        )
    return "\n".join(lines)
