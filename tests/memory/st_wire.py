"""How ST sends a chat request over each connection, for the random story's players: the
chat completion list as it is, with an Author's Note at a depth; converted for Claude as
ST's server converts it (`convertClaudeMessages`: system messages become the user's and
same-role neighbours are merged); and as a text completion prompt with instruct off or in
one of the instruct templates ST ships, with the stop strings ST sends
(`getStoppingStrings`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

NOTE = "[Author's note: the weather turns.]"


def chat_message(message: dict[str, Any], names: str, group: bool) -> dict[str, str]:
    """A file message as ST's chat completion sends it, by its "character names behavior"
    (`names_behavior`): "default" names a group member's reply in its content, "content"
    names every message there, "completion" in the `name` field (`[a-zA-Z0-9_]` only)."""
    role = "user" if message["is_user"] else "assistant"
    text, name = message["mes"], message["name"]
    if names == "content" or (names == "default" and group and not message["is_user"]):
        return {"role": role, "content": f"{name}: {text}"}
    if names == "completion":
        return {"role": role, "content": text, "name": re.sub(r"[^a-zA-Z0-9_]", "", name)[:64]}
    return {"role": role, "content": text}


def with_note(
    messages: list[dict[str, str]], depth: int, role: str = "system"
) -> list[dict[str, str]]:
    """`messages` with ST's Author's Note (a system message, or as `role` says) where
    `depth` chat messages follow it; the chat messages are the user's and the assistant's,
    any other message is ST's own."""
    chat = [i for i, m in enumerate(messages) if m["role"] != "system"]
    if not chat:
        return messages
    at = chat[-depth] if 0 < depth <= len(chat) else (chat[-1] + 1 if depth == 0 else chat[0])
    return [*messages[:at], {"role": role, "content": NOTE}, *messages[at:]]


def with_reasoning(
    shown: list[dict[str, Any]], *, added: int, continued: bool
) -> list[dict[str, Any]]:
    """The file messages `shown` as ST puts them into a prompt, the reasoning of the newest
    `added` replies that have one written before their text in ST's default template
    ("Add to Prompts"; 0: off), and a `continued` reply's always (the loop of ST's
    `Generate` over `PromptReasoning.addToMessage`)."""
    out = [dict(m) for m in shown]
    count = 0
    for i in range(len(out) - 1, -1, -1):
        thought = out[i].get("extra", {}).get("reasoning", "")
        prefix = continued and i == len(out) - 1
        if thought and (prefix or count < added):
            count += 1
            out[i]["mes"] = f"<think>\n{thought}\n</think>\n\n{out[i]['mes']}"
        if count >= added:
            break
    return out


STATUS = re.compile(r" ?<status>[^<]*</status>")


def without_status(shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The file messages `shown` as a prompt-only regex script of the user's sends them:
    the replies' status blocks (`<status>...</status>`) cut out (ST's `getRegexedString`
    with `isPrompt`, placement AI output)."""
    return [m if m["is_user"] else {**m, "mes": STATUS.sub("", m["mes"])} for m in shown]


POST_HISTORY = "[Stay in character; write vividly.]"
# What ST's "squash system messages" leaves alone: its chat starts and the group nudge.
UNSQUASHED = ("[Start a new Chat]", "[Start a new group chat", "[Write the next reply only as")


def squashed(messages: list[dict[str, str]], impersonation: bool) -> list[dict[str, str]]:
    """`messages` with post-history instructions after the chat (before an impersonation's
    prompt, which is last), then ST's "squash system messages" applied: each run of system
    messages without a name joined into one with line breaks (`squashSystemMessages`)."""
    at = len(messages) - 1 if impersonation else len(messages)
    messages = [*messages[:at], {"role": "system", "content": POST_HISTORY}, *messages[at:]]
    out: list[dict[str, str]] = []
    joined = False  # whether the last message out may take the next one
    for message in messages:
        joins = message["role"] == "system" and "name" not in message
        joins = joins and not message["content"].startswith(UNSQUASHED)
        if joins and joined:
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + message["content"]}
        else:
            out.append(message)
        joined = joins
    return out


PLACEHOLDER = "Let's get started."  # ST's `promptPlaceholder` (config.yaml), by default


def post_processed(
    messages: list[dict[str, str]], mode: str, user: str, char: str, group: tuple[str, ...] = ()
) -> list[dict[str, str]]:
    """`messages` as ST's server sends them to a Custom (OpenAI-compatible) endpoint whose
    "Prompt Post-Processing" is `mode` (`mergeMessages` in `src/prompt-converters.js`):
    "merge" folds each named message's name into its content and joins same-role
    neighbours with a blank line; "semi" also makes every system message after the first
    the user's and merges again; "strict" puts a placeholder user message after a leading
    system one where the user's does not follow; "single" makes every message the user's,
    the speakers named, so the whole prompt is one message (a reply that starts with a
    `group` member's name keeps it as it is)."""
    out: list[dict[str, str]] = []
    for message in messages:
        role, text = message["role"], message["content"]
        name = message.get("name")
        if name and role != "system" and not text.startswith(f"{name}: "):
            text = f"{name}: {text}"
        if mode == "single":
            speaker = char if role == "assistant" else user if role == "user" else None
            named = any(text.startswith(f"{member}: ") for member in group)
            if speaker and not text.startswith(f"{speaker}: ") and not named:
                text = f"{speaker}: {text}"
            role = "user"
        out.append({"role": role, "content": text})
    out = _same_roles_joined(out)
    if mode == "merge":
        return out
    out = [m if i == 0 or m["role"] != "system" else {**m, "role": "user"}
           for i, m in enumerate(out)]  # fmt: skip
    if mode == "strict" and out:
        if out[0]["role"] == "system" and (len(out) == 1 or out[1]["role"] != "user"):
            out.insert(1, {"role": "user", "content": PLACEHOLDER})
        elif out[0]["role"] not in ("system", "user"):
            out.insert(0, {"role": "user", "content": PLACEHOLDER})
    return _same_roles_joined(out)


def _same_roles_joined(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"] and message["content"]:
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + message["content"]}
        else:
            out.append(message)
    return out


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


# Instruct templates as ST ships them (`default/content/presets/instruct`), with the
# story string of the context template of the same name (`{}`: the system prompt). How
# each writes names: "always"; "force", only a group member's; "none", never.
PRESETS: dict[str, dict[str, Any]] = {
    "chatml": {
        "preset": "ChatML", "wrap": True, "names_behavior": "always",
        "input_sequence": "<|im_start|>user", "output_sequence": "<|im_start|>assistant",
        "system_sequence": "<|im_start|>system", "stop_sequence": "<|im_end|>",
        "input_suffix": "<|im_end|>\n", "output_suffix": "<|im_end|>\n",
        "system_suffix": "<|im_end|>\n", "system_same_as_user": False,
        "story": "<|im_start|>system\n{}<|im_end|>",
    },
    "llama3": {
        "preset": "Llama 3 Instruct", "wrap": False, "names_behavior": "always",
        "input_sequence": "<|start_header_id|>user<|end_header_id|>\n\n",
        "output_sequence": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "system_sequence": "<|start_header_id|>system<|end_header_id|>\n\n",
        "stop_sequence": "<|eot_id|>", "input_suffix": "<|eot_id|>",
        "output_suffix": "<|eot_id|>", "system_suffix": "<|eot_id|>",
        "system_same_as_user": True,
        "story": "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
    },
    "mistral": {
        "preset": "Mistral V2 & V3", "wrap": False, "names_behavior": "always",
        "input_sequence": "[INST] ", "output_sequence": "[/INST] ",
        "last_output_sequence": "[/INST]", "system_sequence": "", "stop_sequence": "",
        "input_suffix": "", "output_suffix": "</s>", "system_suffix": "",
        "system_same_as_user": True,
        "user_alignment_message": "Let's get started. Please respond based on the "
        "information and instructions provided above.",
        "story": "[INST] {}[/INST] Understood.</s>",
    },
    "alpaca": {
        "preset": "Alpaca", "wrap": True, "names_behavior": "force",
        "input_sequence": "### Instruction:", "output_sequence": "### Response:",
        "system_sequence": "### Input:", "stop_sequence": "", "input_suffix": "\n\n",
        "output_suffix": "\n\n", "system_suffix": "\n\n", "system_same_as_user": False,
        "story": "{}\n\n\n",
    },
    "gemma": {
        "preset": "Gemma 2", "wrap": True, "names_behavior": "none",
        "input_sequence": "<start_of_turn>user", "output_sequence": "<start_of_turn>model",
        "system_sequence": "<start_of_turn>system", "stop_sequence": "<end_of_turn>",
        "input_suffix": "<end_of_turn>\n", "output_suffix": "<end_of_turn>\n",
        "system_suffix": "<end_of_turn>\n", "system_same_as_user": True,
        "story": "<start_of_turn>user\n{}<end_of_turn>",
    },
}  # fmt: skip


def st_settings(template: str) -> dict[str, Any]:
    """ST's settings.json with `template` (a key of `PRESETS`) as its instruct template."""
    preset = {k: v for k, v in PRESETS[template].items() if k != "story"}
    context = {"preset": preset["preset"], "chat_start": ""}
    return {"power_user": {"instruct": {**preset, "enabled": True}, "context": context}}


def _turn(
    preset: dict[str, Any], message: dict[str, Any], user: str, group: bool, *, last: bool = False
) -> tuple[str, str]:
    """One message as ST writes it (`formatInstructModeChat`), and its text there. A
    message without a name is a narrator's: ST's Author's Note. `last`: a continue's
    message, opened with the last output sequence."""
    narrator = not message["name"]
    behaviour = preset["names_behavior"]
    named = not narrator and (
        behaviour == "always" or (behaviour == "force" and group and message["name"] != user)
    )
    if narrator:
        key = "input" if preset["system_same_as_user"] else "system"
    else:
        key = "input" if message["is_user"] else "output"
    prefix = preset[f"{key}_sequence"]
    if last and key == "output":
        prefix = preset.get("last_output_sequence") or prefix
    suffix = preset[f"{key}_suffix"] or ("\n" if preset["wrap"] else "")
    text = f"{message['name']}: {message['mes']}" if named else message["mes"]
    joined = ("\n" if preset["wrap"] else "").join(x for x in (prefix, text + suffix) if x)
    return joined, text


def _opener(preset: dict[str, Any], name: str, impersonate: bool, group: bool) -> str:
    """The open turn that ends the prompt (`formatInstructModePrompt`)."""
    behaviour = preset["names_behavior"]
    named = behaviour == "always" or (group and behaviour == "force")
    last = preset.get("last_output_sequence", "")
    sequence: str = preset["input_sequence"] if impersonate else last or preset["output_sequence"]
    wrap = "\n" if preset["wrap"] else ""
    if not named:
        return sequence + wrap
    # ST's fix for Mistral, whose output sequence ends with a space and its last not.
    filler = preset["output_sequence"][-1] if not impersonate and last == sequence else ""
    filler = filler if filler.isspace() else ""
    return f"{sequence}{wrap}{filler}{name}:"


def text_prompt(
    story: str,
    shown: list[dict[str, Any]],
    *,
    template: str,
    user: str,
    char: str,
    kind: str = "normal",
    note: int | None = None,
    group: bool = False,
    members: Sequence[str] = (),
) -> dict[str, Any]:
    """A text completion body for the file messages `shown`, with instruct off ("plain")
    or in an instruct template of `PRESETS`. `kind`: "normal" (the character's open turn
    ends it), "continue" (the last message, open, ends it) or "impersonate" (the user's
    open turn ends it; ST stops at the character's name first). `note`: the depth of ST's
    Author's Note, a narrator message (`doChatInject`); a continue's depth 0 is 1.
    `group`: a group chat's (names as the template writes them there), whose `members`
    but the one ST writes for (the continued message's speaker in a continue) are stop
    strings, as ST's `names_as_stop_strings` makes them."""
    items = [dict(m) for m in shown]
    if note is not None and items:
        depth = 1 if kind == "continue" and note == 0 else note
        narrator = {"name": "", "mes": NOTE, "is_user": False}
        items.insert(max(0, len(items) - depth), narrator)
    stops = [f"\n{user}:"]
    if kind == "impersonate":
        stops.insert(0, f"\n{char}:")
    writer = shown[-1]["name"] if kind == "continue" and shown else char
    stops += [f"\n{member}:" for member in members if member != writer]
    if template == "plain":
        lines = [f"{m['name']}: {m['mes']}" if m["name"] else m["mes"] for m in items]
        prompt = f"{story}\n***\n" + "".join(line + "\n" for line in lines)
        if kind == "continue" and items:
            prompt = prompt[:-1]
        elif kind != "continue":
            prompt += f"{user if kind == 'impersonate' else char}:"
        return {"prompt": prompt, "max_tokens": 300, "stop": stops}
    preset = PRESETS[template]
    turns = []
    for i, message in enumerate(items):
        last = kind == "continue" and i == len(items) - 1
        written, text = _turn(preset, message, user, group, last=last)
        turns.append(written[: written.rfind(text) + len(text)] if last else written)
    alignment = preset.get("user_alignment_message")
    if alignment and items and not items[0]["is_user"]:  # ST's, before a reply first
        turns.insert(0, _turn(preset, {"name": user, "mes": alignment, "is_user": True},
                              user, group)[0])  # fmt: skip
    prompt = preset["story"].format(story)
    if preset["wrap"] and not prompt.endswith("\n"):
        prompt += "\n"
    if kind != "continue":
        name = user if kind == "impersonate" else char
        turns.append(_opener(preset, name, kind == "impersonate", group))
    # ST's instruct stop strings: each line of its sequences, after a newline if it wraps.
    keys = ("stop", "input", "output", "last_output", "system")
    lines = "\n".join(preset.get(f"{key}_sequence", "") for key in keys).split("\n")
    wrap = "\n" if preset["wrap"] else ""
    stops += [wrap + line for line in lines if line.strip()]
    body = {"prompt": prompt + "".join(turns), "max_tokens": 300}
    return {**body, "stop": list(dict.fromkeys(stops))}
