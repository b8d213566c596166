"""The chat path's body step, shared by the server and `recap-proxy inject`.

parse (adapter) -> memory (provider) -> decide (core) -> splice (adapter). Any failure on
the way sends the original bytes on, and is logged once with what was being done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from adapters import Adapter
from adapters.base import ParsedRequest
from proxy.chat.providers import MemoryProvider
from proxy.core.models import ChatMessage, Memory, Outcome
from proxy.core.plan import InjectionPolicy, MemoryTemplates, left_out, plan_insertions
from proxy.core.render import Template
from proxy.core.tokens import TokenCounter
from proxy.errors import TemplateError, UnknownPromptFormat
from proxy.settings.injection import InjectionSettings
from proxy.settings.templates import bundled_template
from proxy.store import file_error

log = logging.getLogger(__name__)


def _template(inline: str | None, path: Path | None, bundled: str) -> Template:
    if inline is not None:
        return Template(inline)
    path = path or bundled_template(bundled)
    try:
        return Template(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TemplateError(f"cannot read injection template {path}: {exc.strerror}") from None


def load_injection_templates(settings: InjectionSettings) -> MemoryTemplates:
    """The two parts' templates: inline text, else the configured file, else the bundled
    one (`injection.md`, `injection_changing.md`)."""
    changing = settings.changing
    return MemoryTemplates(
        stable=_template(settings.template, settings.template_file, "injection.md"),
        changing=_template(changing.template, changing.template_file, "injection_changing.md"),
    )


def template_problem(templates: MemoryTemplates) -> str | None:
    """Why the memory's main template carries no memory (blank, or no macro in it: the
    running recap never goes into a request), or None."""
    stable = templates.stable
    if not stable.source.strip():
        return "the injection template is blank: no memory goes into any request"
    if not stable.macros:
        return (
            "the injection template holds no macro ({{running_recap}}, ...): its text goes "
            "into requests, but never the memory"
        )
    return None


def policy_from(settings: InjectionSettings) -> InjectionPolicy:
    return InjectionPolicy(
        placement=settings.placement(),
        enabled=settings.enabled,
        use_global_toggle_state=settings.use_global_toggle_state,
        default_chat_enabled=settings.default_chat_enabled,
        chats_enabled=dict(settings.chats_enabled),
        history_start_markers=tuple(settings.history_start_markers),
        changing=settings.changing.placement(),
    )


# How far the history may have moved between two requests for the same messages to be
# found again (ST cuts a few of the oldest when its context is full, a deletion shifts).
MAX_SHIFT = 32
# Below this many messages, hashing them afresh costs less than lining them up with the
# previous request's (bench/step_cost.py: the 12-message body's step 2 % dearer with it,
# the 302-message body's 5 % cheaper).
MIN_REUSED = 32
_SHIFTS = (0, *(d * sign for d in range(1, MAX_SHIFT + 1) for sign in (1, -1)))  # nearest first


def reused(new: list[ChatMessage], old: Sequence[ChatMessage]) -> list[ChatMessage]:
    """`new`, with each message that equals the one at its place in `old` (the previous
    request's, the history shifted as one block) replaced by that same object.

    Consecutive requests of a chat carry mostly the same messages. A string keeps its
    hash once computed, and two references to one string compare at once, so the memory
    step hashes and compares only the messages that are new, where a 300-message request
    would otherwise hash all of its text (about a sixth of its memory step). Equal values
    only are swapped: what the step decides cannot change."""
    n, m = len(new), len(old)
    if n < MIN_REUSED or not m:
        return new
    middle = n // 2  # chat history, in any request long enough for this to matter
    probe = new[middle]
    for shift in _SHIFTS:
        if 0 <= middle + shift < m and old[middle + shift] == probe:
            break
    else:
        return new
    lo, hi = max(0, -shift), min(n, m - shift)
    pairs = zip(new[lo:hi], old[lo + shift : hi + shift], strict=True)
    same = [o if o == c else c for c, o in pairs]
    return [*new[:lo], *same, *new[hi:]]


class Injector:
    """Turns a client body into the upstream body; never raises."""

    def __init__(
        self,
        policy: InjectionPolicy,
        templates: MemoryTemplates,
        provider: MemoryProvider | None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.policy = policy
        self.templates = templates
        self.provider = provider
        self.counter = counter or TokenCounter()
        self._unknown_logged: set[str] = set()  # once per format: it repeats every request
        self._last: dict[str, ParsedRequest] = {}  # per format: the previous request

    async def prepare(
        self,
        adapter: Adapter,
        raw: bytes,
        headers: Mapping[str, str],
        *,
        where: str = "",
        preview: bool = False,
        route: str = "",
        path: str = "",
    ) -> Outcome:
        """The body for upstream. `where`: the request, for a log line (the format's name
        when not given). `preview`: the API shows what would be sent; the chat's upkeep is
        not started by it. `route`, `path`: the upstream route prefix it came under and its
        path there."""
        memory: Memory | None = None
        provider = self.provider
        if provider is None and not preview:
            # No memory to give (no data folder): not even decoding the body is worth it.
            return Outcome(body=raw)
        where = where or adapter.name
        try:
            last = self._last.get(adapter.name)
            parsed = adapter.parse(raw, last)
            parsed.route, parsed.path = route, path
            if last is not None and not parsed.carried:
                parsed.messages = reused(parsed.messages, last.messages)
            self._last[adapter.name] = parsed
            if provider is not None:
                memory = await provider.memory_for(
                    parsed, headers, markers=self.policy.history_start_markers, preview=preview
                )
            insertions = plan_insertions(
                parsed.messages,
                memory,
                self.policy,
                self.templates,
                self.counter.count_paragraphs,
            )
            replacements = memory.replacements if memory is not None else {}
            drop = left_out(memory, insertions)
            if drop:
                drop = adapter.leaves_out(parsed, drop)
            body = raw
            if insertions or replacements:
                body = adapter.apply(parsed, insertions, replacements, drop)
            return Outcome(body, insertions, memory, parsed.messages, drop)
        except UnknownPromptFormat as exc:
            if adapter.name not in self._unknown_logged:
                self._unknown_logged.add(adapter.name)
                log.warning("%s: %s; forwarding such requests unchanged", where, exc)
            return Outcome(body=raw)
        except Exception as exc:
            # Fail open: the user's chat goes on without memory, the cause is in the log.
            log.warning(
                "memory step failed for %s (%s: %s); forwarding the request unchanged",
                where,
                type(exc).__name__,
                exc,
                exc_info=not file_error(exc),  # the store has said why, once
            )
            # The chat stays known (for X-Recap-Chat) when only a later step failed.
            return Outcome(body=raw, memory=memory)
