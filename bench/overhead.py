"""What the proxy adds to a chat request. Prints figures; not a timed test.

    python bench/overhead.py [--rounds N]

A fake upstream (tests/fakes/fake_llm.py) and the proxy (with a memory placed in chat at
depth 4) each run in their own process on 127.0.0.1; this process is the client. The same
requests go direct and through the proxy, interleaved, so both see the same machine load.

Bodies: small (2 messages) and large (300 messages, about 100k tokens). Figures: added
non-stream latency p50/p99, added stream time-to-first-byte, requests/s at 32 concurrent
clients, 64 concurrent streams without errors, and the proxy's resident memory.
Targets (2-core machine): large body at most 1 ms p50 and 3 ms p99 added, at most 1 ms
added to time-to-first-byte, no errors with 64 streams, RSS under 100 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.core.tokens import TokenCounter  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{args} did not start")


def body(n_messages: int, words_per_message: int, stream: bool) -> bytes:
    messages = [
        {"role": "system", "content": "Write Seraphina's next reply in a fictional chat."},
        {"role": "system", "content": "[Start a new Chat]"},
    ]
    filler = (
        "the river spirits whisper of old oaths beneath the silver moon "
        * (words_per_message // 11 + 1)
    ).split()[:words_per_message]
    for i in range(n_messages):
        role = "user" if i % 2 else "assistant"
        messages.append({"role": role, "content": f"({i}) " + " ".join(filler)})
    if n_messages <= 2:
        messages = messages[2:]
    return json.dumps(
        {
            "messages": messages,
            "model": "fake-model",
            "temperature": 1,
            "max_tokens": 300,
            "stream": stream,
        }
    ).encode()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(session: aiohttp.ClientSession, url: str, data: bytes, *, ttfb: bool) -> float:
    started = time.perf_counter()
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: status {r.status}")
        if ttfb:
            await r.content.readany()
            elapsed = time.perf_counter() - started
            await r.read()
            return elapsed
        await r.read()
        return time.perf_counter() - started


async def interleaved(
    session: aiohttp.ClientSession,
    direct: str,
    proxied: str,
    data: bytes,
    rounds: int,
    *,
    ttfb: bool,
) -> tuple[list[float], list[float]]:
    d, p = [], []
    for i in range(rounds + 10):
        order = [(direct, d), (proxied, p)] if i % 2 else [(proxied, p), (direct, d)]
        for url, sink in order:
            value = await timed(session, url, data, ttfb=ttfb)
            if i >= 10:  # warm-up rounds are not counted
                sink.append(value * 1000)
    return d, p


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


def rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def line(label: str, d: list[float], p: list[float]) -> None:
    d50, p50, d99, p99 = pct(d, 0.5), pct(p, 0.5), pct(d, 0.99), pct(p, 0.99)
    print(
        f"  {label:<28} direct p50 {d50:7.2f} ms  p99 {d99:7.2f} | proxied p50 {p50:7.2f} ms"
        f"  p99 {p99:7.2f} | added p50 {p50 - d50:+6.2f} ms  p99 {p99 - d99:+6.2f} ms"
        f" | ratio p50 {p50 / d50:4.2f}"
    )


async def run(rounds: int) -> None:
    llm_port, proxy_port = free_port(), free_port()
    llm = start(["-m", "tests.fakes.fake_llm", "--port", str(llm_port)], llm_port)
    proxy = start(
        [
            "bench/serve_with_memory.py",
            "--port",
            str(proxy_port),
            "--upstream",
            f"http://127.0.0.1:{llm_port}/v1",
        ],
        proxy_port,
    )
    direct = f"http://127.0.0.1:{llm_port}/v1/chat/completions"
    proxied = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
    small, large = body(2, 20, False), body(300, 250, False)
    large_tokens = TokenCounter().count(large.decode())
    print(
        f"bodies: small {len(small)} B; large {len(large) / 1024:.0f} KiB, 300 messages, "
        f"{large_tokens} tokens (cl100k); memory in_chat depth 4"
    )
    try:
        async with aiohttp.ClientSession() as session:
            probe = await session.post(proxied, data=small)
            assert probe.headers["X-Recap-Injected"] != "0", "the memory must be placed"
            await probe.read()
            print(
                f"proxy memory after start-up and a first request: RSS "
                f"{rss_mb(proxy.pid)[0]:.1f} MB (tokenizer loaded)"
            )
            print(f"non-stream latency ({rounds} interleaved rounds each):")
            line(
                "small body",
                *await interleaved(session, direct, proxied, small, rounds, ttfb=False),
            )
            line(
                "large body",
                *await interleaved(session, direct, proxied, large, rounds, ttfb=False),
            )
            print("stream time to first byte:")
            line(
                "small body",
                *await interleaved(session, direct, proxied, body(2, 20, True), rounds, ttfb=True),
            )
            line(
                "large body",
                *await interleaved(
                    session, direct, proxied, body(300, 250, True), rounds, ttfb=True
                ),
            )
        print("throughput, 32 concurrent clients, small body, 2000 requests:")
        d_rps, d_err = await throughput(direct, small, 32, 2000)
        p_rps, p_err = await throughput(proxied, small, 32, 2000)
        print(
            f"  direct {d_rps:7.0f} req/s ({d_err} errors) | proxied {p_rps:7.0f} req/s "
            f"({p_err} errors) | ratio {p_rps / d_rps:4.2f}"
        )
        print("64 concurrent streams, small body, 1024 requests:")
        s_rps, s_err = await throughput(proxied, body(2, 20, True), 64, 1024)
        print(
            f"  proxied {s_rps:7.0f} streams/s, {s_err} errors; proxy RSS "
            f"{rss_mb(proxy.pid)[0]:.1f} MB"
        )
        print("64 concurrent streams, large body, 256 requests:")
        s_rps, s_err = await throughput(proxied, body(300, 250, True), 64, 256)
        rss, peak = rss_mb(proxy.pid)
        print(
            f"  proxied {s_rps:7.0f} streams/s, {s_err} errors; proxy RSS {rss:.1f} MB, "
            f"peak {peak:.1f} MB"
        )
    finally:
        for proc in (proxy, llm):
            proc.terminate()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
