"""What decoding and re-assembling a chat request costs, by how it follows the one before.
Prints figures; not a timed test.

    python bench/decode.py [--requests N]

`bench/overhead.py` sends the same body again and again; ST does not. This takes the
300-message body of that benchmark (about 100k tokens, as ST sends it: compact JSON) and
times the OpenAI adapter's `parse` and `apply` (memory inserted, the covered history left
out) for a request that follows the previous one as ST's do: the same again (a swipe), a
new turn (two messages more), a new turn once the context is full (ST cut the two oldest),
a new turn with an Author's Note at depth 4 (it moves along), and one that shares nothing
with the last (another chat). Per request, the median of N, and the messages decoded
anew.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.base import ParsedRequest  # noqa: E402
from adapters.openai_chat import OpenAIChatAdapter  # noqa: E402
from bench.overhead import SYSTEM, story  # noqa: E402
from proxy.core.models import Insertion, Role  # noqa: E402

ADAPTER = OpenAIChatAdapter()
NOTE = {"role": "system", "content": "[Author's note: it is raining.]"}


def st_body(history: list[dict[str, Any]], note: bool = False) -> bytes:
    if note:
        history = [*history[:-4], NOTE, *history[-4:]]
    body = {"messages": [*SYSTEM, *history], "model": "fake-model", "max_tokens": 300}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def cases() -> list[tuple[str, bytes, bytes | None]]:
    """(label, the body, the body before it)."""
    turns = [
        {"role": "user" if m["is_user"] else "assistant", "content": m["mes"]} for m in story()
    ]
    old, new = turns[:-2], turns
    other = [{**t, "content": t["content"] + " (another chat)"} for t in new]
    return [
        ("decoded whole (no request before it)", st_body(new), None),
        ("the same again (a swipe)", st_body(new), st_body(new)),
        ("a new turn", st_body(new), st_body(old)),
        ("a new turn, ST cut the two oldest", st_body(new[4:]), st_body(old[2:])),
        ("a new turn, Author's Note at depth 4", st_body(new, True), st_body(old, True)),
        ("another chat", st_body(other), st_body(new)),
    ]


def step(raw: bytes, previous: ParsedRequest | None) -> ParsedRequest:
    parsed = ADAPTER.parse(raw, previous)
    n = len(parsed.messages)
    parts = (
        Insertion(0, Role.SYSTEM, "RUNNING RECAP " * 200, 700, part="stable"),
        Insertion(n - 2, Role.SYSTEM, "RECENT " * 300, 600, part="changing"),
    )
    ADAPTER.apply(parsed, parts, {}, range(2, n - 40))
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    print("parse + apply of the 300-message body (memory in, covered history out):")
    for label, raw, before in cases():
        previous = ADAPTER.parse(before) if before is not None else None
        times = []
        for _ in range(args.requests):
            started = time.perf_counter()
            parsed = step(raw, previous)
            times.append(time.perf_counter() - started)
        fresh = len(parsed.messages) - parsed.carried
        print(
            f"  {label:<40} {statistics.median(times) * 1e6:7.0f} us  "
            f"({fresh} of {len(parsed.messages)} messages decoded)"
        )


if __name__ == "__main__":
    main()
