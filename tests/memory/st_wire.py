"""How ST sends a chat request over each connection, for the random story's players: the
chat completion list as it is, with an Author's Note at a depth; converted for Claude as
ST's server converts it (`convertClaudeMessages`: system messages become the user's and
same-role neighbours are merged); and as a text completion prompt in ChatML or with
instruct off, with the stop strings ST sends (`getStoppingStrings`)."""

from __future__ import annotations

from typing import Any

NOTE = "[Author's note: the weather turns.]"


def with_note(messages: list[dict[str, str]], depth: int) -> list[dict[str, str]]:
    """`messages` with ST's Author's Note (a system message) where `depth` chat messages
    follow it; the chat messages are the user's and the assistant's."""
    chat = [i for i, m in enumerate(messages) if m["role"] != "system"]
    if not chat:
        return messages
    at = chat[-depth] if 0 < depth <= len(chat) else (chat[-1] + 1 if depth == 0 else chat[0])
    return [*messages[:at], {"role": "system", "content": NOTE}, *messages[at:]]


def claude(messages: list[dict[str, str]], system_prompt: bool) -> dict[str, Any]:
    """The Messages API body ST sends for `messages`, "use system prompt" on or off."""
    turns = [dict(m) for m in messages]
    system = ""
    if system_prompt:
        lead = 0
        while lead < len(turns) and turns[lead]["role"] == "system":
            system += turns[lead]["content"] + "\n\n"
            lead += 1
        turns = turns[lead:]
        if not turns or turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": "[Start a new chat]"})
    merged: list[dict[str, str]] = []
    for turn in turns:
        role = "assistant" if turn["role"] == "assistant" else "user"
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"] += "\n\n" + turn["content"]
        else:
            merged.append({"role": role, "content": turn["content"]})
    body: dict[str, Any] = {"model": "claude-x", "messages": merged, "max_tokens": 300,
                            "stop_sequences": []}  # fmt: skip
    if system.strip():
        body["system"] = system.strip()
    return body


def text_prompt(
    story: str,
    shown: list[dict[str, Any]],
    *,
    instruct: bool,
    user: str,
    char: str,
    kind: str = "normal",
    note: int | None = None,
) -> dict[str, Any]:
    """A text completion body for the file messages `shown`. `kind`: "normal" (the
    character's open turn ends it), "continue" (the last message, open, ends it) or
    "impersonate" (the user's open turn ends it; ST stops at the character's name first).
    `note`: the depth of ST's Author's Note, a narrator line (`doChatInject`): a system
    turn in ChatML, a line of its own with instruct off; a continue's depth 0 is 1."""

    def turn(message: dict[str, Any], closed: bool = True) -> str:
        line = f"{message['name']}: {message['mes']}"
        if not instruct:
            return line + "\n" if closed else line
        role = "user" if message["is_user"] else "assistant"
        return f"<|im_start|>{role}\n{line}" + ("<|im_end|>\n" if closed else "")

    prompt = f"<|im_start|>system\n{story}<|im_end|>\n" if instruct else f"{story}\n***\n"
    turns = [turn(m) for m in shown]
    if kind == "continue" and shown:
        turns[-1] = turn(shown[-1], closed=False)
        opener = ""
    else:
        name, role = (user, "user") if kind == "impersonate" else (char, "assistant")
        opener = f"<|im_start|>{role}\n{name}:" if instruct else f"{name}:"
    if note is not None and turns:
        depth = 1 if kind == "continue" and note == 0 else note
        line = f"<|im_start|>system\n{NOTE}<|im_end|>\n" if instruct else f"{NOTE}\n"
        turns.insert(max(0, len(turns) - depth), line)
    stops = [f"\n{user}:"]
    if kind == "impersonate":
        stops.insert(0, f"\n{char}:")
    if instruct:
        stops.append("<|im_end|>")
    return {"prompt": prompt + "".join(turns) + opener, "max_tokens": 300, "stop": stops}
