"""Fingerprints: how a message's text is recognised in a request however ST carried it
(whitespace, a speaker's `Name: ` before it, `{{char}}`/`{{user}}` filled in). Pure.

The chat index (`proxy.identify.chat_index`), covered history (`proxy.core.trim`) and
lorebook matching read texts through these, so they sit in the pure core below
identification.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


def normalize(text: str) -> str:
    return " ".join(text.split())


NAME_LONGEST = 40  # characters of a speaker's name read before a message as `Name: `


def readings(normal: str) -> tuple[str, ...]:
    """A normalised request text as it is and, when it starts with a speaker's `Name: `
    (group chats, "names in content", a text prompt's turns), past that name."""
    name, colon, rest = normal.partition(": ")
    return (normal, rest) if colon and rest and len(name) <= NAME_LONGEST else (normal,)


def fingerprint(text: str) -> int:
    return hash(normalize(text))


# `fingerprint` of a request message, memoised: consecutive requests of a chat carry
# mostly the same messages, and normalising them is most of identifying a request.
message_fingerprint = lru_cache(maxsize=2048)(fingerprint)


# A message's fingerprints, each distinct: one per way a request may carry it (with or
# without its speaker's name, macros filled or not), two to four. A tuple, not a
# frozenset: `in` over so few is as fast, and a tuple is a quarter of the memory.
Fingerprints = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IndexedMessage:
    """A visible file message: ST's index, speaker, and its fingerprints."""

    position: int
    is_user: bool
    text: str  # normalised; "" past the newest `TEXT_KEPT` of a chat's tail
    fps: Fingerprints


def index_message(
    position: int, is_user: bool, name: str, text: str, *, char: str = "", user: str = ""
) -> IndexedMessage:
    """The message with the `fingerprint` of each way a request may carry it: its text and
    `{name}: {text}`, each also with `{{char}}`/`{{user}}` filled in where it has them."""
    # Each text is normalised once: `{name}: {text}` normalises to the normalised
    # `{name}:` and the normalised text (whitespace splits it there either way), so it is
    # not split and joined again whole. Normalising was most of indexing a chat.
    label = normalize(name + ":")
    plain = normalize(text)
    normal = {plain, f"{label} {plain}" if plain else label}
    if "{{" in text:
        filled = text
        for macro, value in (("{{char}}", char or name), ("{{user}}", user)):
            if value:
                filled = filled.replace(macro, value).replace(macro.upper(), value)
        filled = normalize(filled)
        normal |= {filled, f"{label} {filled}" if filled else label}
    return IndexedMessage(
        position=position,
        is_user=is_user,
        text=plain,
        fps=tuple({hash(n) for n in normal}),
    )


# `index_message`, memoised: after each save a chat's newest messages are indexed again,
# and all but the one or two the save added or changed are the same as last time.
indexed_message = lru_cache(maxsize=4096)(index_message)
