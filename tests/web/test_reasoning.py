"""A reasoning model's chat: ST sends replies with their thinking before them ("Add to
Prompts", and any Continue), in the template its settings.json names, and the proxy still
tells the chat and the kind of each request (`proxy.identify.reasoning`)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from proxy.web.keys import RUNTIME
from tests.memory.st_wire import text_prompt
from tests.memory.story import CHAR, CHAT_ID, USER, Story
from tests.memory_env import Memory, MemoryFactory
from tests.st_data import save_like_st

THINKING = {"prefix": "<thinking>", "suffix": "</thinking>", "separator": "\n"}
CONTINUE = "[Continue your last message without repeating its original content.]"


def with_thoughts(story: Story) -> None:
    """Nine messages, the last a reply; each reply saved with its reasoning apart
    (`extra.reasoning`)."""
    story.grow(9)
    for i, message in enumerate(story.messages):
        if not message["is_user"]:
            message["extra"]["reasoning"] = f"Reply {i} should stay in character."
    story.save()


def sent(message: dict[str, Any], form: dict[str, str]) -> str:
    """A reply's text as ST sends it with its reasoning (`PromptReasoning.addToMessage`)."""
    thought = message["extra"].get("reasoning")
    if message["is_user"] or not thought:
        return str(message["mes"])
    return f"{form['prefix']}{thought}{form['suffix']}{form['separator']}{message['mes']}"


async def asked(memory: Memory, path: str, body: dict[str, Any]) -> tuple[str, str]:
    """The chat the proxy relayed `body` for, and the kind `/recap/api/identify` tells."""
    response = await memory.client.post(path, json=body)
    assert response.status == 200, await response.text()
    chat = unquote(response.headers.get("X-Recap-Chat", ""))
    told = await (await memory.client.post("/recap/api/identify", json=body)).json()
    return chat, told["generation"]


async def test_replies_sent_with_the_reasoning_of_the_users_template(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(0, set(), build=with_thoughts)
    settings = memory.story.path.parents[2] / "settings.json"
    save_like_st(settings, json.dumps({"power_user": {"reasoning": THINKING}}).encode())
    await memory.until(
        lambda db: len(memory.app[RUNTIME].memory_parts().library.index.reasoning) == 2
    )
    story = memory.story.messages
    # "Add to Prompts" on, every reply: a swipe of the last one leaves it out.
    history = [{"role": "user" if m["is_user"] else "assistant", "content": sent(m, THINKING)}
               for m in story]  # fmt: skip
    head = [{"role": "system", "content": "[Start a new Chat]"}]
    swipe = {"model": "fake-model", "messages": [*head, *history[:-1]]}
    assert await asked(memory, "/v1/chat/completions", swipe) == (CHAT_ID, "swipe")
    # A Continue of the last reply, "Add to Prompts" off: that reply carries its own.
    plain = [{**turn, "content": m["mes"]} for turn, m in zip(history, story, strict=True)]
    nudge = {"role": "system", "content": CONTINUE}
    going_on = [*head, *plain[:-1], history[-1], nudge]
    body = {"model": "fake-model", "messages": going_on}
    assert await asked(memory, "/v1/chat/completions", body) == (CHAT_ID, "continue")
    # The same as a text prompt in ChatML, the reply open at its end.
    shown = [{**m, "mes": sent(m, THINKING) if i == len(story) - 1 else m["mes"]}
             for i, m in enumerate(story)]  # fmt: skip
    story_line = f"Write {CHAR}'s next reply."
    prompt = text_prompt(
        story_line, shown, template="chatml", user=USER, char=CHAR, kind="continue"
    )
    assert await asked(memory, "/v1/completions", prompt) == (CHAT_ID, "continue")
