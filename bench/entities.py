"""The entity memory on the chat path: which of 1,000 entities a request names, and their
cards within the budget. Prints figures; not a timed test.

    python bench/entities.py

1,000 entities (a name and an alias each, three facts), merged from 300 scenes' mentions,
with 300 changes over them (100 each of the user's edits, merges and condensings).
Figures: merging the registry with its changes, and building the cards and the name
matcher (once per registry change, off the request path); then, per request, finding the
entities named and picking their cards: in the last 4 chat messages (what a request reads,
`entities_context`), and in a whole 100k-token request, p50/p99 over 200 runs. Target:
0.3 ms p50 for 1,000 entities against a 100k-token request.
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
from proxy.core.entities import Mention, Mentions, capped, cards_within  # noqa: E402
from proxy.core.entity_changes import Change, resolve  # noqa: E402
from proxy.core.tokens import TokenCounter  # noqa: E402

ENTITIES = 1000
RUNS = 200


def timed(run: object, runs: int = RUNS) -> tuple[float, float]:
    assert callable(run)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    rng = random.Random(1)
    names = [f"{rng.choice(WORDS).title()}{i} {rng.choice(WORDS).title()}" for i in range(ENTITIES)]
    mentions = [
        (scene, scene * 4, Mention(names[i], "character", (names[i].split()[0],),
                                   tuple(" ".join(rng.choices(WORDS, k=8)) for _ in range(3))))
        for i in range(ENTITIES)
        for scene in [rng.randrange(300)]
    ]  # fmt: skip
    changes = []
    for i in range(0, 300, 3):
        facts = tuple(mentions[i][2].facts)
        changes += [
            Change("edit", names[i], name=names[i], type="place", facts=facts[:1], id=i),
            Change("merge", names[i + 1], name=names[i + 500], id=i + 1),
            Change("condense", names[i + 2], facts=facts[:1], covers=mentions[i + 2][2].facts,
                   id=i + 2),
        ]  # fmt: skip
    counter = TokenCounter()
    resolved = [timed(lambda: resolve(mentions, changes), 20)[0]]
    start = time.perf_counter()
    entities = [e for e in resolve(mentions, changes) if not e.deleted]
    cards = [capped(entity, 600, counter.count) for entity in entities]
    matcher = Mentions(entities)
    built = (time.perf_counter() - start) * 1000
    print(
        f"{len(entities)} entities: registry, cards and matcher built in {built:.0f} ms "
        f"(the registry with its {len(changes)} changes alone: {resolved[0]:.1f} ms p50)"
    )

    def message(k: int) -> str:
        words = rng.choices(WORDS, k=60)
        for _ in range(k):
            words.insert(rng.randrange(len(words)), rng.choice(names))
        return " ".join(words)

    newest = [message(1) for _ in range(4)]
    whole = [message(2) for _ in range(1300)]  # about 100k tokens
    tokens = sum(counter.count(m) for m in whole)
    cases = (
        ("the last 4 messages (what a request reads)", newest),
        (f"a whole request ({tokens:,} tokens; a stress, not the chat path)", whole),
    )
    for label, texts in cases:
        named = matcher.newest_first(texts)

        def step(texts: list[str] = texts) -> None:
            cards_within(cards, matcher.newest_first(texts), 600)

        p50, p99 = timed(step)
        print(f"  {label}: {len(named)} named; found and picked p50 {p50:.3f} ms, p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
