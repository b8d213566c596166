"""Lorebook detection: which of 1,000 entries are in a 100k-token prompt. Prints figures.

    python bench/lore.py

The prompt holds 40 of the entries (as ST would insert them, `\\n`-joined in system
messages) among 300 chat messages. Figures: building the matcher (once per book version,
cached), and detection per prompt (whitespace normalisation + the Aho-Corasick pass +
checking each hit), p50/p99 over 50 runs. Target: detection under 20 ms, off the request
path (it runs on the library's worker thread after the request is forwarded).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.words import WORDS  # noqa: E402
from proxy.core.lore import (  # noqa: E402
    LoreMatcher,
    WorldEntry,
    prepare,
)
from proxy.core.tokens import TokenCounter  # noqa: E402
from proxy.identify.chat_index import normalize  # noqa: E402


def main() -> None:
    rng = random.Random(1)
    entries = [
        WorldEntry(
            uid=i,
            key=(f"k{i}",),
            comment=f"entry {i}",
            content=f"Entry {i}: " + " ".join(rng.choice(WORDS) for _ in range(60)),
        )
        for i in range(1000)
    ]
    macros = {"char": "Seraphina", "user": "Arden"}
    lore = prepare("Bench", entries, macros)
    started = time.perf_counter()
    matcher = LoreMatcher(lore)
    build = time.perf_counter() - started
    present = rng.sample(range(1000), 40)
    wi = "\n".join(item.text for i, item in enumerate(lore) if i in present)
    chat = [
        " ".join(rng.choice(WORDS) for _ in range(230)).replace("{{char}}", "Seraphina")
        for _ in range(300)
    ]
    texts = ["Write Seraphina's next reply.", wi, "[Start a new Chat]", *chat]
    tokens = TokenCounter().count("\n".join(texts))
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        found = matcher.active(normalize("\n".join(texts)))
        timings.append(time.perf_counter() - started)
    assert found == set(present), "detection must find exactly the inserted entries"
    timings.sort()
    print(f"1,000 entries, prompt of {tokens} tokens (cl100k), 40 entries present")
    print(f"  matcher build (once per book version): {build * 1000:.1f} ms")
    print(
        f"  detection: p50 {statistics.median(timings) * 1000:.2f} ms, "
        f"p99 {timings[int(len(timings) * 0.99)] * 1000:.2f} ms; found {len(found)}/40"
    )


if __name__ == "__main__":
    main()
