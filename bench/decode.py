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
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.base import ParsedRequest  # noqa: E402
from adapters.openai_chat import OpenAIChatAdapter  # noqa: E402
from bench.overhead import st_request, story, turns  # noqa: E402
from proxy.core.models import Insertion, Role  # noqa: E402

ADAPTER = OpenAIChatAdapter()
NOTE = {"role": "system", "content": "[Author's note: it is raining.]"}


def with_note(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*history[:-4], NOTE, *history[-4:]]


def cases() -> list[tuple[str, bytes, bytes | None]]:
    """(label, the body, the body before it)."""
    new = turns(story())
    old = new[:-2]
    other = [{**t, "content": t["content"] + " (another chat)"} for t in new]

    def st(history: list[dict[str, Any]]) -> bytes:
        return st_request(history, False)

    return [
        ("decoded whole (no request before it)", st(new), None),
        ("the same again (a swipe)", st(new), st(new)),
        ("a new turn", st(new), st(old)),
        ("a new turn, ST cut the two oldest", st(new[4:]), st(old[2:])),
        ("a new turn, Author's Note at depth 4", st(with_note(new)), st(with_note(old))),
        ("another chat", st(other), st(new)),
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
