"""What the chat path reads of a chat's memory: a view rebuilt off the request path after
every change (running recap text, covered messages' fingerprints, injectable message
recaps), and the per-request step over it, which reads no store at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.core.identify import index_message
from proxy.core.models import ChatMessage, Identification
from proxy.core.recaps import Candidate, budget_tokens, render_recaps, select_recaps
from proxy.core.tokens import TokenCounter
from proxy.core.trim import Covered, droppable, trim_cutoff
from proxy.memory.chatinfo import PersonaLookup, chat_names, swipe_of
from proxy.memory.settings import MemorySettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database


@dataclass(frozen=True, slots=True)
class MemoryView:
    """What the chat path needs of one chat's memory, computed off the request path."""

    running: str = ""
    running_version: int | None = None
    covered_through: int | None = None  # newest position the running recap covers
    cutoff: int | None = None  # newest position that may be left out of requests
    covered: Covered = field(default_factory=lambda: Covered(()))
    recaps: tuple[Candidate, ...] = ()  # recaps of uncovered messages, oldest first


@dataclass(frozen=True, slots=True)
class RequestMemory:
    values: dict[str, str]
    drop: tuple[int, ...]


def request_memory(
    view: MemoryView | None,
    settings: MemorySettings,
    ident: Identification,
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    model: str | None,
) -> RequestMemory:
    """The macro values and the request indices to leave out, for one request."""
    if view is None:
        return RequestMemory({}, ())
    present_from = _present_from(ident, history)
    candidates = [c for c in view.recaps if present_from is None or c.position < present_from]
    budget = budget_tokens(
        settings.message_recap_context_limit,
        settings.message_recap_context_type,
        settings.context_for(model),
    )
    values = {
        "running_recap": view.running,
        "recent_recaps": render_recaps(select_recaps(candidates, budget)),
    }
    drop: list[int] = []
    if view.cutoff is not None and view.running:
        keep = {i for i, p in zip(ident.history, ident.positions, strict=False) if p > view.cutoff}
        drop = droppable(messages, history, view.covered, keep)
    return RequestMemory(values, tuple(drop))


@dataclass(frozen=True, slots=True)
class ViewInputs:
    """What building a view needs besides the store."""

    settings: MemorySettings
    counter: TokenCounter
    persona: PersonaLookup


def build_view(
    db: Database,
    inputs: ViewInputs,
    chat_id: str,
    old: MemoryView | None,
    since: int | None = None,
) -> MemoryView:
    """A chat's view, rebuilt after planning (store thread). `old` is the view it
    replaces: its covered fingerprints are kept when nothing before the cutoff changed."""
    memory = db.memory
    current = memory.current_running(chat_id)
    through = memory.position_of(current.new_scene_uid) if current else None
    breaks = [b.position for b in memory.breaks(chat_id) if b.visible]
    cutoff = trim_cutoff(breaks, through, inputs.settings.auto_hide_scene_count)
    if old is not None and old.cutoff == cutoff and (since is None or since > (cutoff or -1)):
        covered = old.covered
    else:
        covered = _covered(db, inputs, chat_id, cutoff)
    recaps: list[Candidate] = []
    stored = memory.message_recaps(chat_id)
    if stored:
        excluded = memory.excluded(chat_id)
        for record in memory.messages_from(chat_id, (through or -1) + 1):
            done = stored.get((record.uid, swipe_of(record)))
            if done is None or record.uid in excluded or record.message.hidden:
                continue
            if done.edited or done.source_hash == text_hash(record.message.mes):
                recaps.append(
                    Candidate(record.position, inputs.counter.count(done.recap), done.recap)
                )
    return MemoryView(
        running=current.content if current else "",
        running_version=current.version if current else None,
        covered_through=through,
        cutoff=cutoff,
        covered=covered,
        recaps=tuple(recaps),
    )


def _covered(db: Database, inputs: ViewInputs, chat_id: str, cutoff: int | None) -> Covered:
    if cutoff is None:
        return Covered(())
    chat = db.chat(chat_id)
    names = chat_names(db, chat_id, inputs.persona)
    visible = db.memory.visible_through(chat_id, cutoff)
    # A group's {{char}} is whoever speaks; a character chat's, its character.
    char = chat.display_name if chat is not None and chat.kind != "group" else ""
    return Covered.of(
        [
            index_message(p, is_user, name, text, char=char or name, user=names["user"]).fps
            for p, is_user, name, text in visible
        ],
        [text for *_, text in visible],
    )


def _present_from(ident: Identification, history: Sequence[int]) -> int | None:
    """The oldest chat position the request (probably) carries: its oldest matched message,
    less the unmatched history messages before it."""
    if not ident.positions:
        return None
    first = ident.history[0]
    before = sum(1 for i in history if i < first)
    return ident.positions[0] - before
