"""Indexing ST's chats and identifying requests. Prints figures; not a timed test.

    python bench/ingest.py

- a generated 10,000-message chat (every other message with three swipes, ~20 MB):
  full index time, and the time from ST's save (rename) of one more message until the
  store and index are updated, through the real watcher;
- a 10,000-message chat carrying ST-Auto-Recap's and MessageSummarize's data: the import
  at its first planning, and what importing costs each later planning;
- chats of 300, 1,000 and 10,000 messages: how long a request waits for the re-read of
  the file ST saved just before sending it (the first after start-up, then later ones);
- 2,000 indexed chats: identification latency of a request (p50/p99, in-process,
  including the freshness stat);
- the process's RSS.
Targets (2-core machine): full index at most 1 s, append at most 150 ms, identification
at most 1 ms p50, RSS at most 250 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.openai_chat import OpenAIChatAdapter  # noqa: E402
from bench.words import CHAT_WORDS as WORDS  # noqa: E402
from proxy.library.chats import ChatLibrary  # noqa: E402
from proxy.library.watcher import Watcher  # noqa: E402
from proxy.memory.edits.importing import Imported, import_chat  # noqa: E402
from proxy.store import Database, Store  # noqa: E402
from tests.memory.extension_chats import four_stage  # noqa: E402

MARKERS = ("[Start a new Chat]",)


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def message(i: int, rng: random.Random, words: int) -> dict[str, object]:
    date = f"2026-05-01T12:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 1000:03d}Z"
    if i % 2:
        return {
            "name": "Alex",
            "is_user": True,
            "is_system": False,
            "send_date": date,
            "mes": f"({i}) " + text(rng, words // 4),
            "extra": {"isSmallSys": False},
        }
    swipes = [f"({i}/{k}) " + text(rng, words) for k in range(3)]
    return {
        "extra": {"api": "custom", "model": "m"},
        "name": "Seraphina",
        "is_user": False,
        "send_date": date,
        "mes": swipes[2],
        "swipe_id": 2,
        "swipes": swipes,
        "swipe_info": [{"send_date": date, "extra": {}} for _ in swipes],
    }


def chat_lines(n: int, seed: int, words: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    header = {
        "chat_metadata": {"integrity": f"slug-{seed}"},
        "user_name": "unused",
        "character_name": "unused",
    }
    yield json.dumps(header).encode()
    for i in range(n):
        yield json.dumps(message(i, rng, words)).encode()


def save_like_st(path: Path, lines: Iterable[bytes]) -> None:
    """Written line by line, so that this process holds no copy of a big chat."""
    tmp = path.with_name(path.name + f".{random.randint(10**8, 10**9)}")
    with tmp.open("wb") as out:
        for i, line in enumerate(lines):
            out.write(b"\n" + line if i else line)
    os.replace(tmp, path)


def rss_mb(field: str = "VmHWM") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Linux: VmHWM starts again from the current RSS (`/proc/self/clear_refs`)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


async def big_chat(root: Path) -> None:
    data = root / "big" / "data"
    folder = data / "default-user" / "chats" / "Seraphina"
    folder.mkdir(parents=True)
    path = folder / "Seraphina - 2026-05-01@12h00m00s000ms.jsonl"
    save_like_st(path, chat_lines(10_000, 1, 220))
    size = path.stat().st_size / 1e6
    library = ChatLibrary(data, Store(root / "big.sqlite3"))
    started = time.perf_counter()
    await library.index_all()
    full = time.perf_counter() - started
    print(
        f"10,000-message chat ({size:.1f} MB, 3 swipes on every reply): "
        f"full index {full * 1000:.0f} ms"
    )
    chat_id = next(iter(library.index.entries))
    timings = []
    async with Watcher(library, debounce_ms=100) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        await asyncio.sleep(0.3)
        rng = random.Random(7)
        for k in range(10):
            new_line = json.dumps(message(10_000 + k, rng, 220)).encode()
            expected = 10_001 + k
            current = path.read_bytes()
            started = time.perf_counter()
            save_like_st(path, [current, new_line])
            del current
            while library.index.entries[chat_id].total != expected:
                await asyncio.sleep(0.001)
            timings.append(time.perf_counter() - started)
            await asyncio.sleep(0.2)
    timings.sort()
    print(
        f"  append one message, save -> store and index updated (watcher, 10 saves): "
        f"p50 {statistics.median(timings) * 1000:.0f} ms, max {timings[-1] * 1000:.0f} ms"
    )
    await library.store.close()


async def save_then_request(root: Path, n: int) -> None:
    """ST saves the user's message, then sends the request at once: the request waits for
    the chat file's re-read (the stat differs). The first re-read after start-up splits
    the whole file; later ones take over the lines the save kept."""
    data = root / f"save{n}" / "data"
    folder = data / "default-user" / "chats" / "Seraphina"
    folder.mkdir(parents=True)
    path = folder / "Seraphina - 2026-05-01@12h00m00s000ms.jsonl"
    save_like_st(path, chat_lines(n, 2, 220))
    library = ChatLibrary(data, Store(root / f"save{n}.sqlite3"))
    await library.index_all()
    chat_id = next(iter(library.index.entries))
    rng = random.Random(9)
    timings = []
    for k in range(11):
        current = path.read_bytes()
        save_like_st(path, [current, json.dumps(message(n + k, rng, 220)).encode()])
        del current
        started = time.perf_counter()
        assert await library.ensure_fresh(chat_id)
        timings.append(time.perf_counter() - started)
    first, later = timings[0], sorted(timings[1:])
    print(
        f"  {n:,} messages ({path.stat().st_size / 1e6:.1f} MB): ST saves one more message "
        f"and sends the request: it waits {first * 1000:.1f} ms for the first re-read, then "
        f"p50 {statistics.median(later) * 1000:.1f} ms, max {later[-1] * 1000:.1f} ms"
    )
    await library.store.close()


async def many_chats(root: Path) -> None:
    data = root / "many" / "data"
    adapter = OpenAIChatAdapter()
    requests = []
    for c in range(2000):
        folder = data / "default-user" / "chats" / f"Char{c % 200}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = list(chat_lines(40, 1000 + c, 60))
        save_like_st(folder / f"Char{c % 200} - chat {c}.jsonl", lines)
        if c % 40 == 0:
            history = [json.loads(line) for line in lines[1:]]
            messages = [
                {"role": "system", "content": "Write the next reply."},
                {"role": "system", "content": "[Start a new Chat]"},
            ]
            messages += [
                {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]}
                for m in history
            ]
            body = json.dumps({"messages": messages, "model": "m"}).encode()
            requests.append(adapter.parse(body).messages)
    library = ChatLibrary(data, Store(root / "many.sqlite3"))
    started = time.perf_counter()
    await library.index_all()
    print(f"2,000 chats of 40 messages: full index {time.perf_counter() - started:.2f} s")
    timings, wrong = [], 0
    for _ in range(20):
        for messages in requests:
            started = time.perf_counter()
            found = await library.identify_request(messages, MARKERS)
            timings.append(time.perf_counter() - started)
            wrong += found.identification is None
    timings.sort()
    p50 = statistics.median(timings) * 1000
    p99 = timings[int(len(timings) * 0.99)] * 1000
    print(
        f"  identification, {len(timings)} requests: p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
        f"{wrong} unidentified"
    )
    await library.store.close()


def extension_lines(n: int) -> Iterator[bytes]:
    """A chat as ST-Auto-Recap and MessageSummarize leave it: a memory on every message,
    a scene every 30 messages with its four-stage recap, a running version per scene."""
    rng = random.Random(3)
    scenes = range(29, n, 30)
    running = {
        "current_version": len(scenes) - 1,
        "versions": [
            {"version": v, "content": text(rng, 300), "scene_count": v + 1,
             "prev_scene_index": None, "new_scene_index": at}
            for v, at in enumerate(scenes)
        ],
    }  # fmt: skip
    header = {"chat_metadata": {"auto_recap_running_scene_recaps": running}}
    yield json.dumps(header).encode()
    for i in range(n):
        line = message(i, rng, 120)
        extra: dict[str, object] = {"qvink_memory": {"memory": text(rng, 20), "include": "short"}}
        if i % 30 == 29:
            extra["auto_recap_memory"] = {
                "scene_break": True,
                "scene_recap_versions": [four_stage(i)],
                "scene_recap_current_index": 0,
                "auto_scene_break_checked": True,
            }
        line["extra"] = {**line["extra"], **extra}  # type: ignore[dict-item]
        yield json.dumps(line).encode()


async def extension_chat(root: Path) -> None:
    data = root / "ext" / "data"
    folder = data / "default-user" / "chats" / "Seraphina"
    folder.mkdir(parents=True)
    save_like_st(folder / "Seraphina - 2026-05-01@12h00m00s000ms.jsonl", extension_lines(10_000))
    store = Store(root / "ext.sqlite3")
    library = ChatLibrary(data, store)
    started = time.perf_counter()
    await library.index_all()
    indexed = time.perf_counter() - started
    chat_id = next(iter(library.index.entries))

    def first(db: Database) -> tuple[Imported, float, float]:
        db.memory.activate(chat_id)
        chat = db.chat(chat_id)
        assert chat is not None
        began = time.perf_counter()
        done = import_chat(db, chat, time.time())
        took = time.perf_counter() - began
        began = time.perf_counter()
        for _ in range(100):
            import_chat(db, chat, time.time())
        return done, took, (time.perf_counter() - began) / 100

    done, took, again = await store.call(first)
    print(
        f"10,000-message chat with extension data (a memory on each, {done.breaks} scenes, "
        f"{done.running} running versions): indexed in {indexed * 1000:.0f} ms; imported "
        f"in {took * 1000:.0f} ms at its first planning, then {again * 1000:.2f} ms per "
        "planning with nothing new"
    )
    await store.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("the request right after a save (no watcher: the request's own re-read):")
        for n in (300, 1_000, 10_000):
            await save_then_request(root, n)
        # The re-read keeps the chat's last split (up to 32 MiB): the peak holds it, the
        # file read anew and this bench's own copy of the file.
        print(f"  RSS peak {rss_mb():.0f} MB; the peak is reset for what follows")
        reset_peak_rss()
        await big_chat(root)
        await extension_chat(root)
        await many_chats(root)
    print(f"RSS of this process: {rss_mb('VmRSS'):.0f} MB now, peak {rss_mb():.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
