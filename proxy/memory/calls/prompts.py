"""The operation prompts: one template per operation, bundled in `templates/`, each
replaceable by a file of the same name in the user's templates folder.

Each prompt goes to the LLM as one user message; the template states the JSON it expects.
The folder is read at start-up and at each reload (`SIGHUP`, `POST /recap/api/reload`),
so a broken override is reported once, then the bundled prompt is used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from proxy.core.genuine import Genuine
from proxy.core.operations import OPERATIONS, Operation
from proxy.core.render import Template
from proxy.settings.memory import MemorySettings
from proxy.settings.templates import bundled_template, user_templates_dir

log = logging.getLogger(__name__)


class Prompts:
    """The four operation templates, rendered into chat messages."""

    def __init__(
        self, templates: Mapping[Operation, Template], sources: Mapping[Operation, Path]
    ) -> None:
        self.templates = dict(templates)
        self.sources = dict(sources)
        # What tells each operation's answer from its prompt coming back.
        self.genuine = {op: Genuine(t.literals) for op, t in self.templates.items()}

    @classmethod
    def load(cls, settings: MemorySettings) -> Prompts:
        folder = user_templates_dir(settings.templates_dir)
        templates: dict[Operation, Template] = {}
        sources: dict[Operation, Path] = {}
        for operation in OPERATIONS:
            name = f"{operation}.md"
            path = folder / name
            if path.is_file():
                try:
                    templates[operation] = Template(path.read_text(encoding="utf-8"))
                    sources[operation] = path
                    log.info("using your %s prompt from %s", operation, path)
                    continue
                except (OSError, UnicodeDecodeError) as exc:
                    log.error("cannot read %s (%s); using the bundled prompt", path, exc)
            bundled = bundled_template(name)
            templates[operation] = Template(bundled.read_text(encoding="utf-8"))
            sources[operation] = bundled
        return cls(templates, sources)

    def messages(self, operation: Operation, values: Mapping[str, str]) -> list[dict[str, str]]:
        text = self.templates[operation].render(values).text
        return [{"role": "user", "content": text}]
