"""The memory engine's upkeep: a generated 1,000-message chat replayed through the proxy.
Prints figures; not a timed test.

    python bench/memory.py [--messages 1000]

The chat grows by ST-style atomic saves (a reply and the user's next message at a time);
after each save a chat request goes through the proxy and the engine is left to finish
its work against the fake LLM (its own process, answering each operation by its header;
a scene ends on every message that carries `[END SCENE]`, every 16 to 30 messages).
Each request carries what fits ST's context (`--context`, 4,096 tokens by default), as ST
cuts a long chat. Printed for each `message_recaps` policy (`needed`, `always`, `off`;
`--every N` sets `scene_break_every`):
- the proxy's own LLM calls and prompt tokens per 100 messages, per operation, against
  ST-Auto-Recap's count (one detection per character message plus five calls per scene);
- engine CPU time: planning per change, and per job (the proxy's thread, LLM wait excluded);
- the size of the final outgoing request with memory and trimming against the raw history;
- the scene breaks found, against those of a check after every message (target: 95 % at
  the same message);
- how often a request lacked a character's message with nothing standing in for it (not
  sent, not in the running recap, no message recap yet).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from adapters import ADAPTERS  # noqa: E402
from bench.overhead import free_port, start  # noqa: E402
from bench.words import CHAT_WORDS, chat_file, st_message  # noqa: E402
from proxy.core.tokens import TokenCounter  # noqa: E402
from proxy.memory.engine import MemoryEngine  # noqa: E402
from proxy.memory.views.request import history_start  # noqa: E402
from proxy.runtime.runtime import build_runtime  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from proxy.web import make_app  # noqa: E402
from proxy.web.keys import RELAY, RUNTIME  # noqa: E402
from tests.fakes.fake_llm import END_SCENE  # noqa: E402
from tests.st_data import save_like_st  # noqa: E402

CHAR, USER = "Ava", "Tom"
CHAT_ID = f"default-user/chats/{CHAR}/{CHAR} - 2026-11-22@10h00m00s"


def story(n: int, seed: int = 7) -> tuple[list[dict[str, Any]], int]:
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    next_end, scenes = rng.randint(16, 30), 0
    for i in range(n):
        is_user = bool(i % 2)
        words = rng.randint(15, 40) if is_user else rng.randint(60, 140)
        text = " ".join(rng.choice(CHAT_WORDS) for _ in range(words)).capitalize() + "."
        if not is_user and i >= next_end:
            text += f" They part ways at the gate. {END_SCENE}"
            next_end, scenes = i + rng.randint(16, 30), scenes + 1
        messages.append(st_message(i, USER if is_user else CHAR, is_user, text))
    return messages, scenes


def request(
    messages: list[dict[str, Any]], sizes: list[int] | None = None, context: int = 0
) -> dict[str, Any]:
    """ST's request: with a `context` size, only the newest messages that fit it (a
    thousand tokens kept for the answer and the system prompt), as ST cuts a chat."""
    first = 0
    if context and sizes is not None:
        room, first = context - 1024, len(messages)
        while first > 0 and sizes[first - 1] <= room:
            room -= sizes[first - 1]
            first -= 1
    history = [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]}
        for m in messages[first:]
    ]
    system = [
        {"role": "system", "content": "You are Ava, a ranger. Stay in character."},
        {"role": "system", "content": "[Start a new Chat]"},
    ]
    return {"model": "fake-model", "messages": system + history}


class Meter:
    """Counts the engine's LLM calls and prompt tokens, and its CPU time."""

    def __init__(self, engine: MemoryEngine, counter: TokenCounter) -> None:
        self.calls: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.plan_cpu: list[float] = []
        self.job_cpu: dict[str, list[float]] = defaultdict(list)
        complete, plan = engine.llm.complete, engine.upkeep.plan

        async def counted(operation: str, chat_id: str, messages: Any, **limits: Any) -> Any:
            self.calls[operation] += 1
            self.tokens[operation] += sum(counter.count(m["content"]) for m in messages)
            return await complete(operation, chat_id, messages, **limits)

        def timed_plan(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time()
            try:
                return plan(*args, **kwargs)
            finally:
                self.plan_cpu.append(time.thread_time() - began)

        engine.llm.complete = counted  # type: ignore[method-assign]
        engine.upkeep.plan = timed_plan  # type: ignore[method-assign]
        for operation, handler in engine.handlers.items():
            run = handler.run

            async def timed_run(job: Any, run: Any = run, operation: str = operation) -> Any:
                began = time.thread_time()
                apply = await run(job)
                # The fake LLM is another process; what the loop did meanwhile for the
                # HTTP call is the client's share and stays in.
                self.job_cpu[operation].append(time.thread_time() - began)
                return apply

            handler.run = timed_run  # type: ignore[method-assign]


async def replay(
    n: int, message_recaps: str, llm_url: str, context: int = 0, **memory: Any
) -> dict[str, Any]:
    """One replay; `context`: ST's context size (0: it sends the whole chat); `memory`:
    more `[memory]` settings (the defaults otherwise)."""
    messages, scenes = story(n)
    counter = TokenCounter()
    sizes = [counter.count(m["mes"]) for m in messages]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        path = data / f"{CHAT_ID}.jsonl"
        save_like_st(path, chat_file(messages[:2], USER, CHAR))
        settings = Settings.model_validate(
            {
                "upstream": {"base_url": llm_url},
                "sillytavern": {"data_dir": str(data), "debounce_ms": 10},
                "store": {"path": str(Path(tmp) / "store.sqlite3")},
                "memory": {"message_recaps": message_recaps, "templates_dir": tmp, **memory},
            }
        )
        app = make_app(build_runtime(settings, counter=counter))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}"
        library = app[RUNTIME].memory_parts().library
        # What each chat request carried upstream (the proxy's own calls do not pass here).
        sent: list[list[dict[str, Any]]] = []
        relay = app[RELAY]
        forward = relay.forward

        async def captured(*args: Any, **kwargs: Any) -> Any:
            body = args[3]
            if body:
                sent.append(json.loads(body)["messages"])
            return await forward(*args, **kwargs)

        relay.forward = captured  # type: ignore[method-assign]
        try:
            while CHAT_ID not in library.index.entries:
                await asyncio.sleep(0.01)
            engine = app[RUNTIME].memory_parts().engine
            meter = Meter(engine, counter)
            gaps = watch_gaps(engine, messages)
            async with aiohttp.ClientSession() as session:
                for end in range(2, n + 1, 2):
                    save_like_st(path, chat_file(messages[:end], USER, CHAR))
                    while library.index.entries[CHAT_ID].total != end:
                        await asyncio.sleep(0.005)
                    body = request(messages[:end], sizes, context)
                    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
                        await r.read()
                    await engine.settle()
                    if end % 200 == 0:
                        print(f"  ... {end} messages", file=sys.stderr)
                lacked = list(gaps)  # the chat requests' (not the preview's below)
                final = request(messages[:n])
                async with session.post(f"{url}/recap/api/preview", json=final) as r:
                    preview = await r.json()
            # The chat path's memory step for that request, in-process (identify, view,
            # trimming, splice): what the engine adds to every request.
            raw = json.dumps(final).encode()
            adapter, injector = ADAPTERS["chat/completions"], app[RUNTIME].injector
            step = []
            for _ in range(50):
                began = time.perf_counter()
                await injector.prepare(adapter, raw, {}, preview=True)
                step.append(time.perf_counter() - began)
            step.sort()
            raw_tokens = sum(counter.count(m["content"]) for m in final["messages"])
            sent_tokens = sum(counter.count(m["content"]) for m in preview["body"]["messages"])
            breaks = await library.store.call(
                lambda db: [b.position for b in db.memory.breaks(CHAT_ID) if b.visible]
            )
        finally:
            await runner.cleanup()
    return {
        "meter": meter,
        "scenes": scenes,
        "detected": len(breaks),
        "breaks": breaks,
        "raw_tokens": raw_tokens,
        "step_ms": (1000 * step[len(step) // 2], 1000 * step[-1]),
        "sent_tokens": sent_tokens,
        "left_out": len(preview["left_out"]),
        "raw_bytes": len(json.dumps(final)),
        "sent_bytes": len(json.dumps(preview["body"])),
        "prefix": prefix_figures(sent, counter),
        "gaps": lacked,
    }


def watch_gaps(engine: MemoryEngine, messages: list[dict[str, Any]]) -> list[int]:
    """For each chat request, the character messages it lacks with nothing standing in
    for them: before where its history starts (ST's cut, stepped), past what the running
    recap covers, and with no message recap yet. `needed` writes a recap once ST's cut
    comes near; this counts what that costs against `always`."""
    gaps: list[int] = []
    request_memory = engine.request_memory

    def watched(ident: Any, sent: Any, history: Any, model: Any) -> Any:
        got = request_memory(ident, sent, history, model)
        view = engine.views.get(ident.chat_id)
        cut, _ = history_start(view, engine.settings, ident, history)
        if view is not None and cut is not None:
            covered = -1 if view.covered_through is None else view.covered_through
            recapped = set(view.shelf.positions)
            lacking = range(covered + 1, cut.start)
            gaps.append(sum(not messages[p]["is_user"] and p not in recapped for p in lacking))
        return got

    engine.request_memory = watched  # type: ignore[method-assign]
    return gaps


STABLE_MARK, CHANGING_MARK = "<ROLEPLAY_RECAP>", "<RECENT_MEMORY>"


def prefix_figures(sent: list[list[dict[str, Any]]], counter: TokenCounter) -> dict[str, float]:
    """How much of each forwarded request a provider's prompt cache could reuse: for each
    request and the one before, the messages both start with. A pair keeps its prefix when
    everything the earlier request had before its changing memory part (or all of it,
    without one) starts the later one too. "Within a scene": the stable part (the running
    recap) is the same in both."""
    kept = within = within_kept = 0
    shared_tokens: list[int] = []
    for before, after in itertools.pairwise(sent):
        shared = 0
        for a, b in zip(before, after, strict=False):
            if a != b:
                break
            shared += 1
        changing = next(
            (i for i, m in enumerate(before) if str(m["content"]).startswith(CHANGING_MARK)),
            len(before),
        )
        ok = shared >= changing
        stable = [m["content"] for m in before if str(m["content"]).startswith(STABLE_MARK)]
        same_scene = stable == [
            m["content"] for m in after if str(m["content"]).startswith(STABLE_MARK)
        ]
        kept += ok
        within += same_scene
        within_kept += ok and same_scene
        shared_tokens.append(sum(counter.count(str(m["content"])) for m in before[:shared]))
    pairs = max(1, len(sent) - 1)
    return {
        "pairs": len(sent) - 1,
        "kept": 100 * kept / pairs,
        "within": within,
        "within_kept": 100 * within_kept / max(1, within),
        "shared_tokens": sum(shared_tokens) / max(1, len(shared_tokens)),
        "request_tokens": sum(
            sum(counter.count(str(m["content"])) for m in messages) for messages in sent
        )
        / max(1, len(sent)),
    }


def report(label: str, n: int, result: dict[str, Any]) -> None:
    meter: Meter = result["meter"]
    per = 100 / n
    calls, tokens = sum(meter.calls.values()), sum(meter.tokens.values())
    st_calls = n // 2 + 5 * result["scenes"]
    print(f"\n== {label} ({n} messages, {result['scenes']} scenes written, "
          f"{result['detected']} detected)")  # fmt: skip
    print(
        f"upkeep per 100 messages: {calls * per:.1f} LLM calls, {tokens * per:,.0f} prompt tokens"
    )
    for op in sorted(meter.calls):
        cpu = meter.job_cpu[op]
        print(
            f"  {op:<19} {meter.calls[op] * per:5.1f} calls  {meter.tokens[op] * per:>9,.0f} tokens"
            f"  CPU/job {1000 * sum(cpu) / max(1, len(cpu)):.2f} ms"
        )
    print(f"ST-Auto-Recap for the same chat: {st_calls * per:.1f} calls per 100 messages "
          f"(one detection per character message + 5 per scene)")  # fmt: skip
    plans = meter.plan_cpu
    print(f"planning CPU: {1000 * sum(plans) / len(plans):.2f} ms per change "
          f"(max {1000 * max(plans):.1f} ms, {len(plans)} plans)")  # fmt: skip
    p50, worst = result["step_ms"]
    print(f"memory step of the final request (in-process): p50 {p50:.2f} ms, max {worst:.2f} ms")
    prefix = result["prefix"]
    print(
        f"prompt prefix kept from one request to the next: {prefix['kept']:.0f} % of "
        f"{prefix['pairs']} pairs; within a scene (same running recap) "
        f"{prefix['within_kept']:.1f} % of {prefix['within']} (target 90 %); shared prefix "
        f"{prefix['shared_tokens']:,.0f} tokens on average of {prefix['request_tokens']:,.0f}"
    )
    gaps = result["gaps"]
    print(
        f"character messages a request lacked with nothing standing in (no running or "
        f"message recap): {sum(gaps)} in {sum(1 for g in gaps if g)} of {len(gaps)} requests"
    )
    print(
        f"final request: {result['raw_tokens']:,} tokens raw -> {result['sent_tokens']:,} with "
        f"memory and trimming ({result['left_out']} messages left out; "
        f"{result['raw_bytes'] / 1024:.0f} KiB -> {result['sent_bytes'] / 1024:.0f} KiB)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--every", type=int, help="scene_break_every (default: the default)")
    parser.add_argument(
        "--context",
        type=int,
        default=4096,
        help="ST's context size in tokens: it sends what fits (default 4096)",
    )
    args = parser.parse_args()
    n = args.messages
    extra = {} if args.every is None else {"scene_break_every": args.every}
    port = free_port()
    fake = start(["-m", "tests.fakes.fake_llm", "--port", str(port)], port)
    try:
        llm_url = f"http://127.0.0.1:{port}/v1"
        found: list[int] = []
        calls = {}
        for policy in ("needed", "always", "off"):
            label = f'message_recaps = "{policy}", ST context {args.context} tokens'
            print(f"replaying with {label}...", file=sys.stderr)
            result = await replay(n, policy, llm_url, args.context, **extra)
            report(label, n, result)
            calls[policy] = result["meter"].calls["message_recap"]
            found = result["breaks"]
        print(f"\nmessage recap calls: {calls['needed']} needed against {calls['always']} "
              f"always ({calls['always'] - calls['needed']} saved)")  # fmt: skip
        # The same chat checked after every message (ST-Auto-Recap's pace): the breaks a
        # slower pace must still find at the same messages (target: 95 % or more).
        print("replaying with a check after every message...", file=sys.stderr)
        reference = (await replay(n, "off", llm_url, scene_break_every=1))["breaks"]
        same = len(set(found) & set(reference))
        print(f"\nscene breaks at the same message as with a check after every message: "
              f"{same} of {len(reference)} ({100 * same / max(1, len(reference)):.0f} %, "
              f"target 95 %); {len(found)} found")  # fmt: skip
    finally:
        fake.terminate()


if __name__ == "__main__":
    asyncio.run(main())
