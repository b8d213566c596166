"""What the chat path's memory step costs, counted by a simulated CPU: the same figures on
every run, however busy the machine is. Prints figures; not a timed test.

    python bench/step_cost.py [--requests N]

Timings of the step swing by a third from one run to the next on a shared machine, too
much to tell a change of a few percent. This runs the step under valgrind's callgrind
(Debian's `valgrind`), which counts the instructions it runs and simulates its caches:
for the small and the large body of `bench/overhead.py` (the same 300-message chat, its
memory built by the fake model first), each request's step (`Injector.prepare`: parse,
identify, memory, plan, splice) after the caches were emptied, as a request finds them
after the other processes of a busy machine ran. Printed per request, the median of the
last eight: instructions, first-level cache misses and last-level misses (each of those
costs tens to hundreds of cycles), and an estimate in cycles (misses weighted 10 and 60).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import body, build_memory, config, free_port, start, story, write_data  # noqa: E402
from proxy.runtime.runtime import build_runtime  # noqa: E402
from proxy.settings import load_settings  # noqa: E402
from proxy.web.app import make_app  # noqa: E402
from proxy.web.keys import RUNTIME  # noqa: E402

# The simulated caches: a common core's first level, and a last level of 2 MiB, this
# process's share of a shared one. The buffer written between requests is twice that.
CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=2097152,16,64"]
EVICT = 4 * 1024 * 1024
# Each request's step runs between these two calls, at which callgrind writes its counts.
START, END = "adler32", "crc32"
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def bodies() -> dict[str, bytes]:
    messages = story()
    return {"small": body(messages[-10:], False), "large": body(messages, False)}


async def build(folder: Path) -> None:
    """The chat, and its memory built by the fake model, in `folder`."""
    write_data(folder / "data", story())
    port = free_port()
    llm = start(["-m", "tests.fakes.fake_llm", "--port", str(port)], port)
    try:
        settings = load_settings(
            config(folder, "memory", f"http://127.0.0.1:{port}/v1", folder / "data", True)
        )
        server = TestServer(make_app(build_runtime(settings)), host="127.0.0.1", port=free_port())
        await server.start_server()
        async with aiohttp.ClientSession() as session:
            await build_memory(session, str(server.make_url("")).rstrip("/"), bodies()["large"])
        await server.close()
    finally:
        llm.terminate()
        llm.wait(10)


async def measure(folder: Path, which: str, requests: int) -> None:
    """Under callgrind: the built memory, then `requests` steps, each after the caches
    were emptied and between the two marker calls."""
    app = make_app(build_runtime(load_settings(folder / "memory.toml")))
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    injector, adapter = app[RUNTIME].injector, app[RUNTIME].formats.for_path("/v1/chat/completions")
    raw, large = bodies()[which], bodies()["large"]
    for _ in range(600):  # the chat folder is indexed in the background
        outcome = await injector.prepare(adapter, large, {}, where="bench")
        if outcome.memory is not None and outcome.memory.identity is not None:
            break
        await asyncio.sleep(0.05)
    else:
        raise SystemExit("the chat was not identified")
    # Enough rounds that every function on the path is quickened and specialised (3.11
    # does that on a function's 8th call and an instruction's first misses): a step is
    # counted as a long-running proxy runs it, not as it runs its first few requests.
    for _ in range(40):
        outcome = await injector.prepare(adapter, raw, {}, where="bench")
    assert outcome.tokens, "the memory must go in"
    buffer = bytearray(EVICT)
    for _ in range(requests):
        buffer[::64] = bytes(EVICT // 64)  # a line of every cache set, written
        zlib.adler32(b"start")
        await injector.prepare(adapter, raw, {}, where="bench")
        zlib.crc32(b"end")
    await server.close()


def counts(folder: Path, which: str, requests: int) -> dict[str, float]:
    out = folder / f"callgrind-{which}"
    out.mkdir()
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--cache-sim=yes",
            *CACHES,
            f"--dump-before={START}",
            f"--dump-before={END}",
            f"--callgrind-out-file={out / 'out'}",
            sys.executable,
            __file__,
            "--measure",
            str(folder),
            which,
            str(requests),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("RECAP_PROXY_")},
            "PYTHONHASHSEED": "0",  # the same hashes, so the same dict layouts, every run
            "PYTHONPATH": str(ROOT),
        },
    )
    steps: list[tuple[int, list[int]]] = []
    for dump in out.glob("out.*"):
        text = dump.read_text()
        trigger = re.search(r"^desc: Trigger: (.*)$", text, re.M)
        if trigger is None or END not in trigger.group(1):
            continue  # not a step: start-up, or the time between two steps
        summary = re.search(r"^summary: (.*)$", text, re.M)
        assert summary is not None
        steps.append((int(dump.suffix[1:]), [int(n) for n in summary.group(1).split()]))
    last = [values for _, values in sorted(steps)[-8:]]
    if not last:
        raise SystemExit(f"no step was counted for the {which} body")
    return {event: statistics.median(v[i] for v in last) for i, event in enumerate(EVENTS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        folder, which, requests = args.measure
        asyncio.run(measure(Path(folder), which, int(requests)))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian: apt install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        asyncio.run(build(folder))
        print("memory step per request, caches emptied before each (callgrind, median of 8):")
        for which in ("small", "large"):
            c = counts(folder, which, args.requests)
            first = c["I1mr"] + c["D1mr"] + c["D1mw"]
            last = c["ILmr"] + c["DLmr"] + c["DLmw"]
            cycles = c["Ir"] + 10 * first + 60 * last
            print(
                f"  {which:<5} {c['Ir']:>11,.0f} instructions  {first:>8,.0f} L1 misses  "
                f"{last:>7,.0f} LL misses  ~{cycles:>11,.0f} cycles"
            )


if __name__ == "__main__":
    main()
