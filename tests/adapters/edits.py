"""What the memory step may do to a request's messages, drawn by Hypothesis for the
adapters' `apply` tests: parts inserted, messages replaced, runs left out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from hypothesis import strategies as st

from adapters.base import Layout, ParsedRequest
from proxy.core.models import ChatMessage, Insertion, Role

Edits = tuple[tuple[Insertion, ...], dict[int, str], set[int]]


@st.composite
def memory_edits(draw: st.DrawFn, size: int) -> Edits:
    """For `size` messages: up to three parts at any index (after the last one too), up to
    three replaced messages, and any messages left out."""
    places = draw(st.lists(st.integers(0, size), max_size=3))
    parts = tuple(Insertion(p, Role.SYSTEM, f"P{k}", 1) for k, p in enumerate(places))
    if not size:
        return parts, {}, set()
    index = st.integers(0, size - 1)
    replaced = {i: f"r{i}" for i in draw(st.sets(index, max_size=3))}
    return parts, replaced, draw(st.sets(index, max_size=size))


def taken_apart(parsed: ParsedRequest, parts: Mapping[int, Sequence[ChatMessage]]) -> None:
    """`parsed` with the merged turns `parts` names taken apart, as identification does
    (`proxy.chat.providers.identify_parsed`)."""
    layout = parsed.layout
    assert layout is not None and layout.merges, "a format whose turns never merge"
    parsed.messages, parsed.layout = layout.take_apart(parsed, parts)


L = TypeVar("L", bound=Layout)


def layout_of(parsed: ParsedRequest, kind: type[L]) -> L:
    """`parsed`'s layout, which its adapter made of this kind."""
    assert isinstance(parsed.layout, kind), parsed.layout
    return parsed.layout
