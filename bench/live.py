"""What the proxy adds to the request that follows each of ST's saves. Prints figures; not a
timed test.

    python bench/live.py [--saves N] [--gap SECONDS] [--runs N]

`bench/overhead.py` sends one chat's same request again and again: the chat file never
changes, so its figures are those of a swipe or a retry. A user's turn goes otherwise: ST
saves the chat with the user's message (its file rewritten whole), builds its prompt, and
only then sends the request, the first one the proxy sees of that chat's new state. This
plays that: a 150-message chat (its memory built beforehand by the fake model) grows by
the model's reply and the user's next message per save, `--gap` after the save (ST
building its prompt: 30 ms, short for ST) its request goes out, the newest 10 messages,
streamed, to each target in a shuffled order. The memory proxy follows the folder as it
runs (it reads each save, plans the chat, calls the fake model for its upkeep).

Figures: the added time to the answer's first byte over the fake model's own (p50), for
the bare pass-through (`bench/bare_proxy.py`), the proxy without a data folder, and the
proxy with the chat's memory, and the memory proxy's ratio to the bare hop's; every
request must be identified and carry memory.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import (  # noqa: E402
    USER,
    body,
    build_memory,
    config,
    free_port,
    serve,
    start,
    stop,
    story,
    timed,
)
from bench.words import chat_file  # noqa: E402
from tests.st_data import save_like_st  # noqa: E402

CHAR = "Lilith"
CHAT_ID = f"default-user/chats/{CHAR}/{CHAR} - 2026-11-24@09h00m00s"
FIRST = 150  # messages in the chat when the rounds start
NEWEST = 10  # messages each request carries


async def rounds(
    session: aiohttp.ClientSession,
    urls: dict[str, str],
    path: Path,
    messages: list[dict[str, Any]],
    saves: int,
    gap: float,
) -> tuple[dict[str, list[float]], int]:
    """Each save, then its request to every target: the times to first byte (ms) by
    target, and how many of the memory proxy's answers named the chat."""
    got: dict[str, list[float]] = {name: [] for name in urls}
    identified = 0
    for k in range(saves):
        count = FIRST + 2 * (k + 1)
        save_like_st(path, chat_file(messages[:count], USER, CHAR))  # a reply, the user's turn
        await asyncio.sleep(gap)
        data = body(messages[count - NEWEST : count], True)
        for name in random.sample(list(urls), len(urls)):
            elapsed, chat = await timed(session, urls[name], data, ttfb=True)
            got[name].append(elapsed * 1000)
            identified += name == "memory" and chat != ""
        await asyncio.sleep(0.05)  # the answer streams; the user reads
    return got, identified


def report(got: dict[str, list[float]], identified: int, saves: int) -> None:
    direct = statistics.median(got["direct"])
    added = {n: statistics.median(v) - direct for n, v in got.items() if n != "direct"}
    print(
        f"  the first request after each save, first byte: direct p50 {direct:.2f} ms; "
        f"{identified} of {saves} identified by the memory proxy"
    )
    for name, value in added.items():
        ratio = value / added["bare"]
        print(f"    {name:<7} added p50 {value:+6.2f} ms  ({ratio:4.2f}x bare)")


async def run(saves: int, gap: float, runs: int) -> None:
    messages = story(seed=11)
    for m in messages:
        if not m["is_user"]:
            m["name"] = CHAR
    saves = min(saves, (len(messages) - FIRST) // 2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = folder / "data"
        path = data / f"{CHAT_ID}.jsonl"
        path.parent.mkdir(parents=True)
        ports = {name: free_port() for name in ("llm", "bare", "plain")}
        llm = f"http://127.0.0.1:{ports['llm']}/v1"
        upstream = f"http://127.0.0.1:{ports['llm']}"
        procs = [
            start(["-m", "tests.fakes.fake_llm", "--port", str(ports["llm"])], ports["llm"]),
            start(
                ["bench/bare_proxy.py", "--port", str(ports["bare"]), "--upstream", upstream],
                ports["bare"],
            ),
            serve(config(folder, "plain", llm, None, True), ports["plain"]),
        ]
        urls = {"direct": f"{llm}/chat/completions"}
        for name in ("bare", "plain"):
            urls[name] = f"http://127.0.0.1:{ports[name]}/v1/chat/completions"
        try:
            async with aiohttp.ClientSession() as session:
                for run_no in range(runs):
                    # A fresh store and the chat as it began: each run builds its memory.
                    save_like_st(path, chat_file(messages[:FIRST], USER, CHAR))
                    ports["memory"] = port = free_port()  # not the last run's kept connections
                    urls["memory"] = f"http://127.0.0.1:{port}/v1/chat/completions"
                    memory = serve(config(folder, f"memory{run_no}", llm, data, True), port)
                    procs.append(memory)
                    began = time.monotonic()
                    base = f"http://127.0.0.1:{ports['memory']}"
                    await build_memory(session, base, body(messages[:FIRST], False), CHAT_ID)
                    print(
                        f"run {run_no + 1} of {runs}: the memory of the {FIRST}-message chat "
                        f"built in {time.monotonic() - began:.1f} s; {saves} saves, each "
                        f"followed {gap * 1000:.0f} ms later by its request ({NEWEST} "
                        "messages, streamed)"
                    )
                    for url in urls.values():  # every target has relayed a long body
                        async with session.post(url, data=body(messages[:FIRST], False)) as r:
                            await r.read()
                    got, identified = await rounds(session, urls, path, messages, saves, gap)
                    stop(memory)
                    procs.remove(memory)
                    report(got, identified, saves)
        finally:
            stop(*procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=60)
    parser.add_argument(
        "--gap", type=float, default=0.03, help="seconds from a save to its request"
    )
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(run(args.saves, args.gap, args.runs))


if __name__ == "__main__":
    main()
