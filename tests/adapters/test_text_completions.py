"""Text completion prompts as ST 1.12.6 sends them (`tests/data/sources/`: generic,
KoboldCpp, llama.cpp, Ollama, KoboldAI Classic; ChatML and instruct off), split into turns,
identified, and given memory as a block of their own template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import adapters.text_completions as text_module
from adapters.instruct import Template, split_prompt
from adapters.text_completions import PromptLayout, TextCompletionAdapter
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.core.placement import find_history
from proxy.errors import UnknownPromptFormat
from tests.adapters.captures import SOURCES, generations, identify_at
from tests.adapters.edits import layout_of, taken_apart

ADAPTER = TextCompletionAdapter()
RUNS = {
    "textgen-generic/chatml_stream": "chatml",
    "textgen-generic/chatml_nonstream": "chatml",
    "textgen-generic/noinstruct_stream": "plain",
    "textgen-generic/chatml_authorsnote_stream": "chatml",
    "textgen-generic/chatml_apikey_stream": "chatml",
    "textgen-koboldcpp/chatml_stream": "chatml",
    "textgen-llamacpp/chatml_stream": "chatml",
    "textgen-ollama/chatml_stream": "chatml",
    "textgen-ollama/chatml_nonstream": "chatml",
    "kobold-classic/chatml_stream": "chatml",
    "kobold-classic/chatml_nonstream": "chatml",
}


def prompt_of(raw: bytes) -> str:
    value: str = json.loads(raw)["prompt"]
    return value


def insert(raw: bytes, index: int, role: Role = Role.SYSTEM) -> str:
    parsed = ADAPTER.parse(raw)
    return prompt_of(ADAPTER.apply(parsed, (Insertion(index, role, "MEMORY", 1),)))


@pytest.mark.parametrize(("run", "template"), RUNS.items())
def test_every_captured_prompt_splits_into_its_turns(run: str, template: str) -> None:
    for step, raw in generations(run).items():
        parsed = ADAPTER.parse(raw)
        kind = layout_of(parsed, PromptLayout).template
        assert (kind if isinstance(kind, str) else kind.name) == template, step
        messages = parsed.messages
        assert messages[0].role == "system" and "Write Seraphina's next reply" in messages[0].text
        greeting = [m for m in messages if m.role == "assistant" and "You wake" in m.text]
        assert len(greeting) == 1, step
        last = messages[-1]
        assert last.role == "assistant" and last.name == "Seraphina", step
        users = [m for m in messages if m.role == "user"]
        assert users and all(m.name == "User" for m in users), step
        span = find_history(messages, ("[Start a new Chat]",))
        assert messages[span.indices[-1]].role == "user" or step == "07_continue"
        # Nothing to do: the prompt comes back as it was.
        assert prompt_of(ADAPTER.apply(parsed, ())) == prompt_of(raw)


def test_memory_as_a_block_of_the_template() -> None:
    raw = generations("textgen-generic/chatml_stream")["05_send_03"]
    prompt = prompt_of(raw)
    before = insert(raw, 0)
    assert before == "<|im_start|>system\nMEMORY<|im_end|>\n" + prompt
    in_prompt = insert(raw, 1)  # after the story string: the first turn after it
    story_end = prompt.index("<|im_start|>assistant\n")
    assert (
        in_prompt
        == prompt[:story_end] + "<|im_start|>system\nMEMORY<|im_end|>\n" + prompt[story_end:]
    )
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, ())
    at_end = insert(raw, span.end)  # in_chat depth 0, a system memory
    head, _, tail = prompt.rpartition("<|im_start|>assistant\nSeraphina:")
    assert (
        at_end == head + "<|im_start|>system\nMEMORY<|im_end|>\n<|im_start|>assistant\nSeraphina:"
    )
    assert tail == ""
    as_user = insert(raw, span.indices[-2], Role.USER)
    assert "<|im_start|>user\nMEMORY<|im_end|>\n<|im_start|>assistant\nSeraphina: [fake" in as_user
    plain_raw = generations("textgen-generic/noinstruct_stream")["05_send_03"]
    plain = ADAPTER.parse(plain_raw)
    plain_span = find_history(plain.messages, ())
    placed = insert(plain_raw, plain_span.end)
    assert placed.endswith("\nMEMORY\nSeraphina:")


def test_left_out_turns_are_cut_from_the_prompt() -> None:
    raw = generations("textgen-generic/chatml_stream")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, ())
    drop = span.indices[:3]
    out = prompt_of(ADAPTER.apply(parsed, (Insertion(1, Role.SYSTEM, "MEMORY", 1),), None, drop))
    assert "You wake with a start" not in out and "Hello Seraphina, where am I" not in out
    assert out.count("<|im_start|>") == prompt_of(raw).count("<|im_start|>") - 3 + 1
    again = ADAPTER.parse(json.dumps({"prompt": out}).encode())
    assert [m.role for m in again.messages][:3] == ["system", "system", "user"]
    assert again.messages[1].text == "MEMORY"


@pytest.mark.parametrize(
    ("template", "prompt", "roles"),
    [
        ("llama3", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nStory<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nAva:", ["system", "user", "assistant"]),
        ("gemma", "<start_of_turn>user\nStory\n\nHi<end_of_turn>\n<start_of_turn>model\nHello"
         "<end_of_turn>\n<start_of_turn>model\n", ["user", "assistant", "assistant"]),
        ("mistral", "<s>[INST] Story\n\nHi [/INST]Hello</s>[INST] How are you? [/INST]",
         ["user", "assistant", "user", "assistant"]),
        ("alpaca", "Story\n\n### Instruction:\nHi\n\n### Response:\nHello\n\n### Instruction:\n"
         "Bye\n\n### Response:\n", ["system", "user", "assistant", "user", "assistant"]),
        ("vicuna", "Story\nUSER: Hi\nASSISTANT: Hello\nUSER: Bye\nASSISTANT:",
         ["system", "user", "assistant", "user", "assistant"]),
    ],
)  # fmt: skip
def test_other_templates(template: str, prompt: str, roles: list[str]) -> None:
    found = split_prompt({}, prompt)
    assert found is not None
    assert (found[0] if isinstance(found[0], str) else found[0].name) == template
    assert [t.role for t in found[1]] == roles
    raw = json.dumps({"prompt": prompt}).encode()
    assert prompt_of(ADAPTER.apply(ADAPTER.parse(raw), ())) == prompt
    with_memory = insert(raw, len(roles) - 1)
    assert "MEMORY" in with_memory and with_memory.endswith(prompt[found[1][-1].start :])


def test_a_prompt_in_no_known_template_is_refused() -> None:
    with pytest.raises(UnknownPromptFormat):
        ADAPTER.parse(b'{"prompt": "Once upon a time"}')


async def test_every_captured_request_is_identified(tmp_path: Path) -> None:
    for run in RUNS:
        kinds = [
            await identify_at(
                SOURCES / run, step, ADAPTER.parse(raw).messages, tmp_path / run / step
            )
            for step, raw in generations(run).items()
        ]
        assert kinds == ["normal"] * 3 + ["swipe", "continue"], run


@pytest.mark.parametrize(
    ("run", "close"),
    [("textgen-llamacpp/chatml_stream", "<|im_end|>\n<|im_start|>user\n"),
     ("textgen-generic/noinstruct_stream", "\n")],
)  # fmt: skip
async def test_an_impersonation_is_identified(run: str, close: str, tmp_path: Path) -> None:
    # ST's impersonation ends the prompt with the user's open turn (`User:`) after the
    # chat as it is, and stops at the character's name first. Here, after the continue's
    # chat: its prompt ends with the reply the file holds.
    body = json.loads(generations(run)["07_continue"])
    body["prompt"] += close + "User:"
    body["stop"] = ["\nSeraphina:", "\nUser:", *body.get("stop", [])[1:]]
    parsed = ADAPTER.parse(json.dumps(body).encode())
    assert (parsed.messages[-1].role, parsed.messages[-1].text) == ("user", "")
    span = find_history(parsed.messages, ())
    assert span.end == len(parsed.messages) - 1  # the open turn is not history
    kind = await identify_at(SOURCES / run, "07_continue", parsed.messages, tmp_path)
    assert kind == "quiet"


CUSTOM = {
    "enabled": True,
    "preset": "My RP",
    "input_sequence": "<<H>>",
    "output_sequence": "<<A>>",
    "system_sequence": "<<S>>",
    "input_suffix": "<<END>>\n",
    "output_suffix": "<<END>>\n",
    "wrap": True,
    "system_same_as_user": False,
}


def test_the_template_active_in_st_comes_first() -> None:
    template = Template.from_st(CUSTOM)
    assert template is not None and template.name == "st:My RP"
    assert (template.user, template.system, template.end) == ("<<H>>\n", "<<S>>\n", "<<END>>\n")
    prompt = "<<S>>\nStory<<END>>\n<<H>>\nTom: Hi<<END>>\n<<A>>\nAva: Hello<<END>>\n<<A>>\nAva:"
    raw = json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode()
    with pytest.raises(UnknownPromptFormat):
        ADAPTER.parse(raw)
    settings = [{"instruct": CUSTOM}]
    adapter = TextCompletionAdapter(lambda: settings)
    parsed = adapter.parse(raw)
    assert adapter.active()[0] is adapter.active()[0]  # converted once, not per request
    assert [(m.role, m.name, m.text) for m in parsed.messages] == [
        ("system", None, "Story"), ("user", "Tom", "Hi"), ("assistant", "Ava", "Hello"),
        ("assistant", "Ava", ""),
    ]  # fmt: skip
    placed = json.loads(adapter.apply(parsed, (Insertion(3, Role.SYSTEM, "MEMORY", 1),)))["prompt"]
    head = prompt.rpartition("<<A>>\nAva:")[0]
    assert placed == head + "<<S>>\nMEMORY<<END>>\n<<A>>\nAva:"
    assert Template.from_st({**CUSTOM, "enabled": False}) is None
    assert Template.from_st({**CUSTOM, "system_same_as_user": True}).system is None  # type: ignore[union-attr]
    assert Template.from_st({"enabled": True, "input_sequence": "", "output_sequence": "x"}) is None


def test_the_chat_start_of_sts_context_template_splits_a_prompt_with_instruct_off() -> None:
    prompt = "Story of Ava.\n<START>\nTom: Hi there\nAva: Hello\nTom: How are you?\nAva:"
    raw = json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode()
    with pytest.raises(UnknownPromptFormat):
        ADAPTER.parse(raw)  # no `***`: ST's Default context is not what wrote it
    settings = [{"instruct": {}, "context": {"chat_start": "<START>"}}]
    adapter = TextCompletionAdapter(lambda: settings)
    parsed = adapter.parse(raw)
    assert [(m.role, m.name, m.text) for m in parsed.messages] == [
        ("system", None, "Story of Ava."), ("user", "Tom", "Hi there"),
        ("assistant", "Ava", "Hello"), ("user", "Tom", "How are you?"),
        ("assistant", "Ava", ""),
    ]  # fmt: skip
    placed = json.loads(adapter.apply(parsed, (Insertion(3, Role.SYSTEM, "MEMORY", 1),)))["prompt"]
    assert placed == prompt.replace("Tom: How", "MEMORY\nTom: How")


def test_a_continue_of_the_only_message() -> None:
    """The greeting continued (or a group's first reply): no open turn names the
    character, and with instruct off its name starts one line, that of the message
    continued; in a template, the prompt has no user turn."""
    for story in ("Story of Ava.\n***\n", "Story of Ava.\n***\n[Author's note: rain.]\n"):
        # A line inside the message that starts like a name is not its speaker.
        greeting = "*The glade is quiet.*\nSign: the bridge is out.\nShe waits."
        parsed = ADAPTER.parse(
            json.dumps({"prompt": f"{story}Ava: {greeting}", "stop": ["\nTom:"]}).encode()
        )
        found = [(m.role, m.name, m.text) for m in parsed.messages]
        assert found == [("system", None, "Story of Ava."), ("assistant", "Ava", greeting)]
    # In a template, the greeting continued: a system turn and a reply, no user turn.
    prompt = "<|im_start|>system\nStory.<|im_end|>\n<|im_start|>assistant\nAva: Hello"
    parsed = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
    assert [(m.role, m.text) for m in parsed.messages] == [
        ("system", "Story."),
        ("assistant", "Ava: Hello"),
    ]
    # Alpaca writes the story without a turn of its own: the greeting continued is one
    # reply after it; the greeting and the next reply asked for with no message of the
    # user's (a group's next member, an empty send) are two (hunt seed 6220).
    story = "The story.\n\n\n### Response:\nAva: Hello."
    first = ("assistant", None, "Ava: Hello.")  # as ChatML's above: Ava is named nowhere else
    for prompt, replies in (
        (story, [first]),
        (f"{story}\n\n### Response:\nTom:", [first, ("assistant", "Tom", "")]),
    ):
        parsed = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
        found = [(m.role, m.name, m.text) for m in parsed.messages]
        assert found == [("system", None, "The story."), *replies]
    # In a template's continue, a turn that starts like a name is no speaker's.
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSign: the bridge is out."
    parsed = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
    assert parsed.messages[-1] == ChatMessage("assistant", "Sign: the bridge is out.")
    # Nothing names a speaker at all: still no template the proxy knows.
    with pytest.raises(UnknownPromptFormat):
        ADAPTER.parse(json.dumps({"prompt": "Story.\n***\nOnce.", "stop": ["\nTom:"]}).encode())


def test_a_groups_members_are_the_speakers_sts_stop_strings_name() -> None:
    """In a group, ST stops at every member's name but the one it writes for: with
    instruct off, a member whose only line in the prompt starts a message is still that
    member's message, and in a continue of the one member left out of them (who may have
    no other line), the line after the last known speaker's that names someone is the
    continued message's start (its reasoning, then its text)."""

    def turns(prompt: str, *stops: str) -> list[tuple[str, str | None, str]]:
        body = {"prompt": prompt, "stop": [f"\n{name}:" for name in stops]}
        return [(m.role, m.name, m.text) for m in ADAPTER.parse(json.dumps(body).encode()).messages]

    prompt = "Story.\n***\nTom: Hi all\nAva: Hello\nOrin: Here.\nTom: Good.\nAva:"
    assert turns(prompt, "Tom", "Orin")[1:] == [
        ("user", "Tom", "Hi all"), ("assistant", "Ava", "Hello"), ("assistant", "Orin", "Here."),
        ("user", "Tom", "Good."), ("assistant", "Ava", ""),
    ]  # fmt: skip
    thought = "<think>\nHm.\n</think>\n\nHere, and"
    prompt = f"Story.\n***\nAva: Hello\nTom: Hi\nAva: More\nTom: Orin?\nOrin: {thought}"
    assert turns(prompt, "Tom", "Ava")[-2:] == [
        ("user", "Tom", "Orin?"),
        ("assistant", "Orin", thought),
    ]
    # The member continued is known (no stop string names her): a line of her message
    # that starts like a name is hers.
    prompt = "Story.\n***\nTom: Hi\nAva: Hello\nOrin: Yo\nTom: And?\nAva: Well.\nSign: out."
    assert turns(prompt, "Tom", "Orin")[-1] == ("assistant", "Ava", "Well.\nSign: out.")


def test_a_replaced_turn_text_changes_in_place_with_the_memory_and_a_cut() -> None:
    block = '<ST_METADATA>{"chat": "c"}</ST_METADATA>\n'
    prompt = (
        f"<|im_start|>system\n{block}Story<|im_end|>\n<|im_start|>user\nTom: Hi<|im_end|>\n"
        "<|im_start|>assistant\nAva: Hello<|im_end|>\n<|im_start|>assistant\nAva:"
    )
    raw = json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode()
    parsed = ADAPTER.parse(raw)
    assert parsed.messages[0].text == block + "Story"
    sent = ADAPTER.apply(parsed, (Insertion(2, Role.SYSTEM, "MEMORY", 1),), {0: "Story"}, drop={1})
    assert prompt_of(sent) == (
        "<|im_start|>system\nStory<|im_end|>\n<|im_start|>system\nMEMORY<|im_end|>\n"
        "<|im_start|>assistant\nAva: Hello<|im_end|>\n<|im_start|>assistant\nAva:"
    )


def test_the_two_memory_parts_are_two_blocks_each_in_its_place() -> None:
    raw = generations("textgen-generic/chatml_stream")["05_send_03"]
    prompt = prompt_of(raw)
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, ())
    parts = (
        Insertion(0, Role.SYSTEM, "STABLE", 1, part="stable"),
        Insertion(span.indices[-2], Role.SYSTEM, "CHANGING", 1, part="changing"),
    )
    out = prompt_of(ADAPTER.apply(parsed, parts))
    assert out.startswith("<|im_start|>system\nSTABLE<|im_end|>\n" + prompt[:40])
    changing = out.index("<|im_start|>system\nCHANGING<|im_end|>\n")
    # Two chat messages follow the changing part (a reply, the user's), then the open turn.
    assert out[changing:].count("<|im_start|>") == 4
    assert (
        out.replace("<|im_start|>system\nSTABLE<|im_end|>\n", "").replace(
            "<|im_start|>system\nCHANGING<|im_end|>\n", ""
        )
        == prompt
    )
    # At one place, in the order given.
    both = (parts[0], Insertion(0, Role.SYSTEM, "CHANGING", 1, part="changing"))
    top = prompt_of(ADAPTER.apply(parsed, both))
    assert top.startswith(
        "<|im_start|>system\nSTABLE<|im_end|>\n<|im_start|>system\nCHANGING<|im_end|>\n"
    )


def test_a_turn_taken_apart_with_instruct_off_keeps_each_part_in_its_place() -> None:
    note = "[Author's note: it rains.]"
    prompt = f"Story of Ava.\n***\nTom: Hi there\nAva: Hello\nTom: How are you?\n{note}\nAva:"
    parsed = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
    assert parsed.layout is not None and parsed.layout.merges and parsed.merged_with == "\n"
    assert parsed.messages[3] == ChatMessage("user", f"How are you?\n{note}", "Tom")
    parts = [ChatMessage("user", "How are you?", "Tom"), ChatMessage("system", note)]
    taken_apart(parsed, {3: parts})
    assert parsed.messages[3:5] == parts
    # Each part can go alone, or have memory before it alone.
    out = prompt_of(ADAPTER.apply(parsed, (), None, [3]))
    assert out == prompt.replace("Tom: How are you?\n", "")
    memory = prompt_of(ADAPTER.apply(parsed, (Insertion(4, Role.SYSTEM, "MEMORY", 1),)))
    assert memory == prompt.replace(note, f"MEMORY\n{note}")
    # A part not found in its turn leaves the turn whole.
    again = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
    assert again.layout is not None and again.layout.merges
    taken_apart(again, {3: [parts[0], ChatMessage("system", "[Not there.]")]})
    assert len(again.messages) == 5
    assert again.messages[3] == ChatMessage("user", f"How are you?\n{note}", "Tom")


def test_a_later_part_that_names_its_speaker_is_that_speakers_message() -> None:
    """In a group with instruct off, a member whose name starts one line only reads as
    more of the turn before; taken apart, that line is the member's reply (a continue of
    it is a continue, not one of ST's prompts or the user's line)."""
    prompt = "Story.\n***\nTom: Hi all\nAva: Hello\nTom: Orin?\nAva: Near.\nOrin: Here, and"
    parsed = ADAPTER.parse(json.dumps({"prompt": prompt, "stop": ["\nTom:"]}).encode())
    assert parsed.layout is not None and parsed.layout.merges
    assert parsed.messages[-1] == ChatMessage("assistant", "Near.\nOrin: Here, and", "Ava")
    parts = [
        ChatMessage("assistant", "Near.", "Ava"),
        ChatMessage("assistant", "Orin: Here, and", "Ava"),
    ]
    taken_apart(parsed, {4: parts})
    assert parsed.messages[4:] == [
        ChatMessage("assistant", "Near.", "Ava"),
        ChatMessage("assistant", "Here, and", "Orin"),
    ]
    out = prompt_of(ADAPTER.apply(parsed, (Insertion(5, Role.SYSTEM, "MEMORY", 1),)))
    assert out == prompt.replace("Orin: Here", "MEMORY\nOrin: Here")
    # A part that is the user's line is the user's; one that only starts like a name
    # (an action, a quote) stays the turn's.
    tom = ChatMessage("user", "Tom: later", "Ava")
    assert text_module._spoken(tom, {"Tom"}) == ChatMessage("user", "later", "Tom")
    for text in ('*She says: "hi"*', '"Wait: what?"', "[Note: rain]"):
        odd = ChatMessage("user", text, "Tom")
        assert text_module._spoken(odd, {"Tom"}) == odd
