"""Live reload: the config file and every template read again, without dropping a
connection (`SIGHUP`, `POST /recap/api/reload`).

Everything new is built first (settings validated, templates read, prompts loaded), so a
mistake changes nothing and is reported whole. Then the owners take their new parts: the
injector its policy and templates, the engine its settings and prompts (its chats are
planned again), the upstream its APIs and keys, the guard its policy, the logs their
level. What lives in a listening socket, an open file or a running task cannot change
without a restart; those settings are named, never their values (keys among them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from proxy.chat.injection import (
    Injector,
    load_injection_templates,
    policy_from,
    template_problem,
)
from proxy.core.guard import LivePolicy
from proxy.core.tokens import TokenCounter
from proxy.errors import ConfigError
from proxy.memory.calls.prompts import Prompts
from proxy.memory.engine import MemoryEngine
from proxy.memory.views.view import Frame
from proxy.observe.logs import setup_logging
from proxy.settings import Settings
from proxy.upstream.upstreams import Upstream

log = logging.getLogger(__name__)

# Settings that only a restart applies (dotted names; a trailing dot: the whole section).
RESTART = (
    "server.host",
    "server.port",
    "server.record_dir",
    "server.access_log",
    "store.",
    "sillytavern.",
    "queue.",
    "upstream.connect_timeout",
    "upstream.read_timeout",
    "upstream.max_connections",
    "upstream.ca_file",
    "upstream.verify",
    "server.header_timeout",
    "record.",
    "memory.llm.base_url",
    # The embedder is built for one API and model (its vectors are kept under them).
    "memory.embeddings.",
)


@dataclass(frozen=True, slots=True)
class Reloaded:
    changed: list[str]  # settings that changed and took effect
    restart: list[str]  # settings that changed and wait for a restart


class Reloader:
    """Owns nothing: it hands each owner its new parts."""

    def __init__(
        self,
        load: Callable[[], Settings],
        started: Settings,
        injector: Injector,
        upstream: Upstream,
        guard: LivePolicy,
        guard_policy: Callable[[Settings], Any],
        engine: MemoryEngine | None = None,
        counter: TokenCounter | None = None,
        logs: bool = False,
    ) -> None:
        self.load = load
        self.started = self.current = started
        self.injector = injector
        self.upstream = upstream
        self.guard = guard
        self.guard_policy = guard_policy
        self.engine = engine
        self.counter = counter or injector.counter
        self.logs = logs  # the process's logging is ours to set (serve), not a test's

    def reload(self) -> Reloaded:
        """Read and apply; raises `ConfigError` / `TemplateError` with nothing changed."""
        new = self.load()
        # The running socket keeps its address until a restart: the key must guard both.
        for host in (self.started.server.host, new.server.host):
            problem = new.server.unguarded(host)
            if problem is not None:
                raise ConfigError(f"the reload would leave the proxy open: {problem}")
        templates = load_injection_templates(new.injection)
        problem = template_problem(templates)
        if problem is not None:
            log.warning("%s ([injection] template, template_file)", problem)
        prompts = Prompts.load(new.memory) if self.engine is not None else None
        changed = sorted(_changed(self.current, new))
        restart = sorted(k for k in _changed(self.started, new) if _needs_restart(k))
        policy = policy_from(new.injection)
        self.injector.policy, self.injector.templates = policy, templates
        if self.engine is not None and prompts is not None:
            frame = Frame(sum(map(self.counter.count, templates.own_text())), templates.macros)
            self.engine.reconfigure(new.memory, policy, frame, prompts)
        self.upstream.retarget(new.upstream)
        self.guard.current = self.guard_policy(new)
        if self.logs:
            setup_logging(new.server.log_level, new.server.log_format)
        self.current = new
        live = [k for k in changed if not _needs_restart(k)]
        log.info(
            "reloaded the config and the templates%s",
            f"; changed: {', '.join(live)}" if live else " (no setting changed)",
        )
        if restart:
            log.warning(
                "these changed settings take effect after a restart: %s", ", ".join(restart)
            )
        return Reloaded(live, restart)


def _needs_restart(name: str) -> bool:
    return any(name == r or (r.endswith(".") and name.startswith(r)) for r in RESTART)


def _changed(old: Settings, new: Settings) -> Iterator[str]:
    """The dotted names of the settings that differ (secrets compared, never shown)."""
    a, b = _flat(old), _flat(new)
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            yield key


def _flat(model: BaseModel, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.update(_flat(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = value
    return out
