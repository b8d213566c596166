"""The reasoning ST writes into a prompt before a reply's text. Pure.

A reasoning model's reply is saved with its thinking apart from its text
(`extra.reasoning`), and ST may put the thinking back when it sends the chat:
`{prefix}{reasoning}{suffix}{separator}{text}` (`PromptReasoning.addToMessage`), for
its newest replies when "Add to Prompts" is on (as many as "Max Additions" says, one by
default), and always for the reply a Continue goes on with. A message so sent is not its
file's text: identification compares the text after the reasoning when the message as
it came is none of the indexed chats' (`proxy.identify.match`). A file whose text holds a
model's own `<think>` block (ST's auto-parse off) is sent as it is, and matched so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ReasoningFormat:
    """How a user's ST wraps reasoning (`power_user.reasoning` in its settings.json)."""

    prefix: str
    suffix: str
    separator: str


# ST's defaults (its "DeepSeek" reasoning template), for a user whose settings say none.
DEFAULT_REASONING = ReasoningFormat("<think>\n", "\n</think>", "\n\n")
# Before the prefix, a speaker's `Name: ` (ST names speakers in the content in group
# chats, and in every message with "names in content"): at most this long.
LABEL_MAX = 72


def reasoning_format(settings: Mapping[str, Any]) -> ReasoningFormat | None:
    """The format of one user's `power_user.reasoning` settings, or None when it has
    no prefix and suffix to tell reasoning by (ST's "Blank" template)."""
    prefix, suffix = settings.get("prefix"), settings.get("suffix")
    separator = settings.get("separator", DEFAULT_REASONING.separator)
    if not (isinstance(prefix, str) and prefix and isinstance(suffix, str) and suffix):
        return None
    return ReasoningFormat(prefix, suffix, separator if isinstance(separator, str) else "")


def without_reasoning(text: str, formats: Sequence[ReasoningFormat]) -> str | None:
    """`text` without the reasoning ST wrote before it in one of `formats` (a speaker's
    `Name: ` before it kept), or None when it starts with none."""
    for form in formats:
        prefix = form.prefix
        at = text.find(prefix, 0, LABEL_MAX + len(prefix))
        if at < 0:
            continue
        label = text[:at]
        if label and (not label.endswith(": ") or "\n" in label):
            continue
        end = text.find(form.suffix, at + len(prefix))
        if end < 0:
            continue
        rest = text[end + len(form.suffix) :]
        if form.separator and rest.startswith(form.separator):
            rest = rest[len(form.separator) :]
        return label + rest
    return None
