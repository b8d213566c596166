"""What the memory step may do to a request's messages, drawn by Hypothesis for the
adapters' `apply` tests: parts inserted, messages replaced, runs left out."""

from __future__ import annotations

from hypothesis import strategies as st

from proxy.core.models import Insertion, Role

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
