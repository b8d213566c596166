"""What the proxy adds to a chat request. Prints figures; not a timed test.

    python bench/overhead.py [--rounds N] [--runs N]   (300 rounds per body, 3 runs)

Five targets, each in its own process on 127.0.0.1 (this process is the client):
- direct: the fake model (tests/fakes/fake_llm.py) itself;
- bare: a bare aiohttp pass-through (bench/bare_proxy.py), the yardstick;
- plain: `recap-proxy serve` without a data folder (no memory);
- memory: `recap-proxy serve` on an ST data folder whose chat matches the requests, its
  memory built beforehand by the fake model (scenes, running recap): every request is
  identified, the memory inserted and the covered history left out (the defaults);
- memory, no trimming: the same with `auto_hide_scene_count = -1`, so that the upstream
  gets every message and its answer time does not flatter the figure.
Each round visits the targets in a shuffled order, so all see the same machine load.
Every target gets the large and the small body once before any round, so that each is
measured in the state it keeps once it has relayed a long chat (see `run`).

Bodies: small (the chat's newest 10 messages, about 1k tokens) and large (all 300
messages, about 100k tokens, as ST sends a chat that fits a large context). Figures:
added latency p50/p99 and added stream time to first byte over direct, for each proxy;
the ratio of the memory step's added p50 to the bare hop's (target at most 1.3; at the
end, each run's and the worst), and the memory step's own share (memory's added p50 less
plain's); requests/s at 32 concurrent clients (the median of 5 passes) against the bare
hop's (target at least 0.7 with memory), and the CPU time each proxy and the fake model
spent per request in those passes; 64 concurrent streams without errors; the proxy's
resident memory (target under 100 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.words import CHAT_WORDS, chat_file, st_message  # noqa: E402
from proxy.core.tokens import TokenCounter  # noqa: E402
from tests.fakes.fake_llm import END_SCENE  # noqa: E402
from tests.st_data import save_like_st  # noqa: E402

CHAR, USER = "Seraphina", "Arden"
CHAT_ID = f"default-user/chats/{CHAR}/{CHAR} - 2026-11-22@10h00m00s"
SYSTEM = [
    {"role": "system", "content": f"Write {CHAR}'s next reply in a fictional chat."},
    {"role": "system", "content": "[Start a new Chat]"},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("RECAP_PROXY_")}
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{args} did not start")


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """End what `start` started, and wait for each to go."""
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    """The chat's words: the bench's common ones and made-up ones, so that messages have
    as many distinct words as prose does (the per-text work scales with them)."""
    syllables = [
        "ka",
        "lo",
        "mi",
        "ren",
        "tha",
        "vel",
        "dor",
        "sa",
        "ni",
        "quo",
        "fen",
        "bri",
        "ast",
        "mur",
        "eld",
        "yon",
    ]
    made = {"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(size)}
    return [*CHAT_WORDS, *sorted(made)]


def story(seed: int = 5) -> list[dict[str, Any]]:
    """300 messages: long ones (about 330 tokens), the newest 10 short (about 90), a scene
    ending every 20 to 30 messages."""
    rng = random.Random(seed)
    words_ = vocabulary(rng)
    # Zipf-like: a few words often, most rarely, as in prose.
    weights = [1 / (rank + 1) for rank in range(len(words_))]
    messages: list[dict[str, Any]] = []
    next_end = rng.randint(20, 30)
    for i in range(300):
        is_user = bool(i % 2)
        words = rng.randint(30, 40) if i >= 290 else rng.randint(125, 150)
        text = f"({i}) " + " ".join(rng.choices(words_, weights, k=words)) + "."
        if not is_user and i >= next_end and i < 280:
            text += f" They part ways at the gate. {END_SCENE}"
            next_end = i + rng.randint(20, 30)
        messages.append(st_message(i, USER if is_user else CHAR, is_user, text))
    return messages


def write_data(folder: Path, messages: list[dict[str, Any]]) -> None:
    save_like_st(folder / f"{CHAT_ID}.jsonl", chat_file(messages, USER, CHAR))


def turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ST chat-file messages as a chat completion's history."""
    return [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in messages
    ]


def st_request(history: list[dict[str, Any]], stream: bool) -> bytes:
    """A request as ST sends it: `JSON.stringify`'s compact JSON, `messages` first (the
    Content-Length of every request captured from a real ST is that of this encoding),
    then the fields ST 1.12.6 sends to a Custom (OpenAI-compatible) endpoint, in its order
    (`tests/cassettes/st-1.12.6`): the step reads and writes them back too."""
    return json.dumps(
        {
            "messages": [*SYSTEM, *history],
            "model": "fake-model",
            "temperature": 1,
            "max_tokens": 300,
            "stream": stream,
            "presence_penalty": 0,
            "frequency_penalty": 0,
            "top_p": 1,
            "logit_bias": {},
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def body(messages: list[dict[str, Any]], stream: bool) -> bytes:
    return st_request(turns(messages), stream)


def config(folder: Path, name: str, llm: str, data: Path | None, trim: bool) -> Path:
    lines = [
        "[upstream]",
        f'base_url = "{llm}"',
        "[store]",
        f'path = "{folder / (name + ".sqlite3")}"',
        "[memory]",
        f'templates_dir = "{folder}"',  # the bundled prompts, not a user's overrides
        f"auto_hide_scene_count = {1 if trim else -1}",
        "[sillytavern]",
    ]
    if data is not None:
        lines.append(f'data_dir = "{data}"')
    else:
        # No data folder: one that is not there, not waited for (with watching on, serve
        # would wait for it to appear, its library and watch running meanwhile).
        lines += [f'data_dir = "{folder / "absent"}"', "watch = false"]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def serve(cfg: Path, port: int) -> subprocess.Popen[bytes]:
    return start(["-m", "proxy", "serve", "--config", str(cfg), "--port", str(port)], port)


async def build_memory(
    session: aiohttp.ClientSession, base: str, large: bytes, chat_id: str = CHAT_ID
) -> None:
    """The first identified request starts the chat's upkeep; wait until it is done."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the chat folder is indexed after start-up
        async with session.post(f"{base}/v1/chat/completions", data=large) as r:
            await r.read()
            if r.headers.get("X-Recap-Chat"):
                break
        await asyncio.sleep(0.2)
    while time.monotonic() < deadline:
        async with session.get(f"{base}/recap/api/chats") as r:
            chats = await r.json()
        memory = next((c.get("memory") for c in chats if c["id"] == chat_id), None)
        if memory and memory["running_version"] and not any(memory["queue"].values()):
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"{base}: the memory was not built in time: {memory}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(
    session: aiohttp.ClientSession, url: str, data: bytes, *, ttfb: bool
) -> tuple[float, str]:
    """The time to the answer's first byte (`ttfb`) or its end, and the chat the proxy
    named (`X-Recap-Chat`; "" from a target that names none)."""
    started = time.perf_counter()
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: status {r.status}")
        if ttfb:
            await r.content.readany()
            elapsed = time.perf_counter() - started
            await r.read()
        else:
            await r.read()
            elapsed = time.perf_counter() - started
        return elapsed, r.headers.get("X-Recap-Chat", "")


async def rounds_of(
    session: aiohttp.ClientSession, urls: dict[str, str], data: bytes, rounds: int, ttfb: bool
) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {name: [] for name in urls}
    order = list(urls)
    for i in range(rounds + 10):
        random.shuffle(order)
        for name in order:
            value, _ = await timed(session, urls[name], data, ttfb=ttfb)
            if i >= 10:  # warm-up rounds are not counted
                got[name].append(value * 1000)
    return got


def report(label: str, got: dict[str, list[float]]) -> dict[str, float]:
    direct = pct(got["direct"], 0.5)
    added = {name: pct(v, 0.5) - direct for name, v in got.items() if name != "direct"}
    print(f"  {label}: direct p50 {direct:.2f} ms, p99 {pct(got['direct'], 0.99):.2f} ms")
    for name, values in got.items():
        if name == "direct":
            continue
        p99 = pct(values, 0.99) - pct(got["direct"], 0.99)
        ratio = added[name] / added["bare"] if added["bare"] > 0 else float("nan")
        print(
            f"    {name:<18} added p50 {added[name]:+6.2f} ms  p99 {p99:+6.2f} ms"
            f"  ({ratio:4.2f}x bare)"
        )
    # What the memory step costs by itself, whatever the relay under it costs.
    step = added["memory"] - added["plain"]
    print(f"    the memory step itself (memory - plain): {step:+.2f} ms")
    return added


async def throughput(url: str, data: bytes, clients: int, total: int) -> tuple[float, int]:
    errors = 0
    done = 0
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors, done
            while done < total:
                done += 1
                try:
                    async with session.post(url, data=data) as r:
                        await r.read()
                        errors += r.status != 200
                except aiohttp.ClientError:
                    errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return total / (time.perf_counter() - started), errors


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def run(rounds: int, runs: int) -> None:
    messages = story()
    small, large = body(messages[-10:], False), body(messages, False)
    small_s, large_s = body(messages[-10:], True), body(messages, True)
    count = TokenCounter().count
    print(
        f"bodies: small {len(small) / 1024:.1f} KiB, 10 messages, {count(small.decode())} "
        f"tokens; large {len(large) / 1024:.0f} KiB, 300 messages, {count(large.decode())} "
        "tokens (cl100k)"
    )
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = folder / "data"
        write_data(data, messages)
        ports = {name: free_port() for name in ("llm", "bare", "plain", "memory", "notrim")}
        llm = f"http://127.0.0.1:{ports['llm']}/v1"
        try:
            procs.append(
                start(["-m", "tests.fakes.fake_llm", "--port", str(ports["llm"])], ports["llm"])
            )
            procs.append(
                start(
                    [
                        "bench/bare_proxy.py",
                        "--port",
                        str(ports["bare"]),
                        "--upstream",
                        f"http://127.0.0.1:{ports['llm']}",
                    ],
                    ports["bare"],
                )
            )
            procs.append(serve(config(folder, "plain", llm, None, True), ports["plain"]))
            memory = serve(config(folder, "memory", llm, data, True), ports["memory"])
            procs.append(memory)
            procs.append(serve(config(folder, "notrim", llm, data, False), ports["notrim"]))
            base = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            async with aiohttp.ClientSession() as session:
                began = time.monotonic()
                await asyncio.gather(
                    build_memory(session, base["memory"], large),
                    build_memory(session, base["notrim"], large),
                )
                async with session.post(f"{base['memory']}/v1/chat/completions", data=large) as r:
                    await r.read()
                    injected, left_out = (
                        r.headers["X-Recap-Injected"],
                        r.headers.get("X-Recap-Trimmed", "0"),
                    )
                async with session.post(f"{base['memory']}/v1/chat/completions", data=small) as r:
                    await r.read()
                    assert r.headers["X-Recap-Chat"], "the small body must be identified"
                print(
                    f"memory built in {time.monotonic() - began:.1f} s; the large request "
                    f"carries {injected} memory tokens, {left_out} messages left out; memory "
                    f"proxy RSS {rss_mb(memory.pid)[0]:.1f} MB (plain "
                    f"{rss_mb(procs[2].pid)[0]:.1f} MB, bare {rss_mb(procs[1].pid)[0]:.1f} MB)"
                )
                urls = {
                    "direct": f"{base['llm']}/v1/chat/completions",
                    "bare": f"{base['bare']}/v1/chat/completions",
                    "plain": f"{base['plain']}/v1/chat/completions",
                    "memory": f"{base['memory']}/v1/chat/completions",
                    "memory, no trimming": f"{base['notrim']}/v1/chat/completions",
                }
                # Every target in its steady state before anything is counted: a process
                # that has not yet freed a large buffer (the 460 KiB body) keeps glibc's
                # malloc thresholds at their start values, and then each answer's 256 KiB
                # socket read buffer costs an mmap and munmap or a heap trim (page faults,
                # TLB shootdowns: about 110 us of CPU per request in the bare hop, measured
                # with `perf`). Our proxies free one at start-up; the bare hop did only
                # after the large-body rounds, so its first small-body figures ran slower.
                for url in urls.values():
                    for data_ in (large, small):
                        async with session.post(url, data=data_) as r:
                            await r.read()
                ratios: dict[str, list[float]] = {}
                for run_no in range(runs):
                    print(f"run {run_no + 1} of {runs}, {rounds} rounds per body:")
                    for label, data_, ttfb in (
                        ("small body", small, False),
                        ("large body", large, False),
                        ("small body, stream, first byte", small_s, True),
                        ("large body, stream, first byte", large_s, True),
                    ):
                        added = report(label, await rounds_of(session, urls, data_, rounds, ttfb))
                        ratio = added["memory"] / added["bare"]
                        ratios.setdefault(label, []).append(ratio)
            print(f"memory proxy RSS after the rounds: {rss_mb(memory.pid)[0]:.1f} MB")
            print(
                "throughput, 32 concurrent clients, small body, 2000 requests; 5 passes, the "
                "targets in shuffled order in each (a single pass swings by a third here):"
            )
            passes: dict[str, list[float]] = {"bare": [], "plain": [], "memory": []}
            failed: dict[str, int] = dict.fromkeys(passes, 0)
            pids = {"bare": procs[1].pid, "plain": procs[2].pid, "memory": memory.pid}
            llm_pid = procs[0].pid
            cpu: dict[str, list[float]] = {name: [0.0, 0.0] for name in passes}
            for _ in range(5):
                order = list(passes)
                random.shuffle(order)
                for name in order:
                    before = cpu_seconds(pids[name]), cpu_seconds(llm_pid)
                    rps, errors = await throughput(urls[name], small, 32, 2000)
                    cpu[name][0] += cpu_seconds(pids[name]) - before[0]
                    cpu[name][1] += cpu_seconds(llm_pid) - before[1]
                    passes[name].append(rps)
                    failed[name] += errors
            bare_rps = pct(passes["bare"], 0.5)
            for name, got in passes.items():
                rps = pct(got, 0.5)
                print(
                    f"  {name:<8} median {rps:7.0f} req/s (passes {min(got):.0f}-{max(got):.0f}, "
                    f"{failed[name]} errors), {rps / bare_rps:4.2f}x bare"
                )
            # CPU time is steadier than requests/s on a shared machine: a neighbour's load
            # stretches wall time, not the time this process itself runs.
            used = {name: 1e6 * spent / (5 * 2000) for name, (spent, _) in cpu.items()}
            print(
                "CPU per request in the proxy during those passes: "
                + ", ".join(f"{name} {us:.0f} us" for name, us in used.items())
                + f"; the memory step {used['memory'] - used['plain']:+.0f} us over plain; "
                "in the fake model: "
                + ", ".join(
                    f"{name} {1e6 * llm / (5 * 2000):.0f} us" for name, (_, llm) in cpu.items()
                )
            )
            print("64 concurrent streams through the memory proxy:")
            for label, data_, total in (("small", small_s, 1024), ("large", large_s, 256)):
                rps, errors = await throughput(urls["memory"], data_, 64, total)
                print(f"  {label} body: {rps:7.0f} streams/s, {errors} errors")
            rss, peak = rss_mb(memory.pid)
            print(
                f"memory proxy RSS after 64 concurrent large streams {rss:.1f} MB, peak "
                f"{peak:.1f} MB (target under 100 MB)"
            )
            print(
                "the memory step against the bare hop, each run and the worst "
                "(target at most 1.3x):"
            )
            for label, got in ratios.items():
                each = ", ".join(f"{ratio:4.2f}x" for ratio in got)
                print(f"  {label:<32} {each}; worst {max(got):4.2f}x")
        finally:
            stop(*procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.runs))


if __name__ == "__main__":
    main()
