"""Reading a text-completion prompt back into its turns: where each turn sits, who speaks
it, and which template wrote it (ST's own first)."""

from __future__ import annotations

import itertools

from adapters.instruct import TEMPLATES, Template, chat_start, split_prompt

CHATML = next(t for t in TEMPLATES if t.name == "chatml")


def test_each_turn_knows_its_place_in_the_prompt_and_its_speaker() -> None:
    prompt = (
        "<|im_start|>system\nThe story.<|im_end|>\n"
        "<|im_start|>user\nTom: Hi<|im_end|>\n"
        "<|im_start|>assistant\nAva: Hello<|im_end|>\n"
        "<|im_start|>assistant\nBo: Hey<|im_end|>\n"
        "<|im_start|>assistant\nBo: Still here<|im_end|>\n"
        "<|im_start|>assistant\nAva:"
    )
    found = split_prompt({"stop": ["\nTom:"]}, prompt)
    assert found is not None
    template, turns = found
    assert template == CHATML
    assert [(t.role, t.name, t.text) for t in turns] == [
        ("system", None, "The story."),
        ("user", "Tom", "Hi"),  # the user, from the stop string
        ("assistant", "Ava", "Hello"),  # the character, from the open turn
        ("assistant", "Bo", "Hey"),  # a group member: starts two turns
        ("assistant", "Bo", "Still here"),
        ("assistant", "Ava", ""),
    ]
    # The turns tile the prompt: each from its opener to the next one's.
    assert turns[0].start == 0 and turns[-1].end == len(prompt)
    for turn, following in itertools.pairwise(turns):
        assert turn.end == following.start
        assert prompt[turn.start : turn.end].startswith("<|im_start|>")


def test_a_bos_token_is_no_system_prompt_and_an_opener_may_lose_its_space_at_the_end() -> None:
    llama = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    llama += "<|start_header_id|>assistant<|end_header_id|>\n\n"
    found = split_prompt({}, llama)
    assert found is not None
    assert [(t.role, t.text) for t in found[1]] == [("user", "Hi"), ("assistant", "")]

    vicuna = "USER: Hi\nASSISTANT: Hello\nUSER: Bye\nASSISTANT:"
    found = split_prompt({}, vicuna)
    assert found is not None and isinstance(found[0], Template) and found[0].name == "vicuna"
    assert [(t.role, t.text) for t in found[1]][-1] == ("assistant", "")


def test_sts_own_template_comes_before_the_known_ones() -> None:
    own = Template.from_st(
        {
            "enabled": True,
            "preset": "Mine",
            "input_sequence": "<|im_start|>user",
            "output_sequence": "<|im_start|>assistant",
            "system_sequence": "",
            "output_suffix": "<|im_end|>\n",
        }
    )
    assert own is not None and own.name == "st:Mine" and own.system is None
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    found = split_prompt({}, prompt, [own])
    assert found is not None and found[0] is own
    assert split_prompt({}, prompt, [])[0] == CHATML  # type: ignore[index]


def test_sts_settings_become_a_template_only_when_they_can_split_a_prompt() -> None:
    custom = {
        "enabled": True,
        "input_sequence": "<<H>>",
        "output_sequence": "<<A>>",
        "system_sequence": "<<S>>",
        "input_suffix": "<<END>>\n",
        "wrap": False,
    }
    template = Template.from_st(custom)
    assert template is not None and template.name == "st"
    assert (template.user, template.assistant, template.system) == ("<<H>>", "<<A>>", "<<S>>")
    assert template.end == "<<END>>\n"
    # Settings without a suffix per role (ST before 1.12): each turn closes with the one.
    assert template.block("user", "x") == "<<H>>x<<END>>\n"
    assert template.block("system", "x") == "<<S>>x<<END>>\n"
    # With them, each role as ST closes it: a system turn with an empty suffix has none.
    own = Template.from_st({**custom, "system_suffix": "", "output_suffix": "<<A-END>>"})
    assert own is not None and own.block("system", "x") == "<<S>>x"
    assert own.block("assistant", "x") == "<<A>>x<<A-END>>"
    assert own.block("user", "x") == "<<H>>x<<END>>\n"
    assert Template.from_st({**custom, "enabled": False}) is None
    assert Template.from_st({**custom, "output_sequence": "<<H>>"}) is None  # one opener
    assert Template.from_st({**custom, "input_sequence": "  "}) is None


def test_memory_in_sts_mistral_is_written_as_st_writes_its_own_turns() -> None:
    # ST's "Mistral V2 & V3": a user turn has no closer, an assistant's ends with `</s>`,
    # a system turn is the user's. Memory must not close a user turn with `</s>`.
    mistral = {
        "enabled": True,
        "preset": "Mistral V2 & V3",
        "input_sequence": "[INST] ",
        "output_sequence": "[/INST] ",
        "last_output_sequence": "[/INST]",
        "system_sequence": "",
        "input_suffix": "",
        "output_suffix": "</s>",
        "system_suffix": "",
        "system_same_as_user": True,
        "wrap": False,
    }
    template = Template.from_st(mistral)
    assert template is not None
    assert template.block("system", "Memory.") == "[INST] Memory."
    assert template.block("user", "Memory.") == "[INST] Memory."
    assert template.block("assistant", "Memory.") == "[/INST] Memory.</s>"
    wrapped = Template.from_st({**mistral, "wrap": True})
    assert wrapped is not None and wrapped.block("system", "Memory.") == "[INST] \nMemory.\n"


def test_mistral_is_read_by_its_markers_not_as_pairs() -> None:
    # As ST writes it: two user messages in a row have no `[/INST]` between them, and an
    # impersonation ends with the user's open turn.
    prompt = (
        "[INST] The story.[/INST] Understood.</s>[INST] Tom: Hi[/INST] Ava: Hello</s>"
        "[INST] Tom: Are you there?[INST] Tom: Hello?[/INST] Ava: Yes.</s>[INST] Tom:"
    )
    found = split_prompt({"stop": ["\nAva:", "\nTom:"]}, prompt)
    assert found is not None and found[0] == "mistral"
    assert [(t.role, t.name, t.text) for t in found[1]] == [
        ("user", None, "The story."),
        ("assistant", None, "Understood."),
        ("user", "Tom", "Hi"),
        ("assistant", "Ava", "Hello"),
        ("user", "Tom", "Are you there?"),
        ("user", "Tom", "Hello?"),
        ("assistant", "Ava", "Yes."),
        ("user", "Tom", ""),
    ]


def test_alpacas_input_is_a_system_turn() -> None:
    # ST's Alpaca writes a narrator message (its Author's Note) as `### Input:`: not more
    # of the user's message before it.
    prompt = (
        "The story.\n\n\n### Response:\nHello.\n\n### Instruction:\nWhere am I?\n\n"
        "### Input:\n[Author's note: it rains.]\n\n### Response:\n"
    )
    found = split_prompt({"stop": ["\nTom:"]}, prompt)
    assert found is not None
    assert [(t.role, t.text) for t in found[1]] == [
        ("system", "The story."),
        ("assistant", "Hello."),
        ("user", "Where am I?"),
        ("system", "[Author's note: it rains.]"),
        ("assistant", ""),
    ]


def test_the_chat_start_as_it_stands_in_the_prompt() -> None:
    assert chat_start({"chat_start": "<START>"}) == "\n<START>\n"
    assert chat_start({"chat_start": "  "}) is None
    assert chat_start({}) is None
    prompt = "Story of Ava.\n<START>\nTom: Hi\nAva: Hello\nTom: Bye\nAva:"
    found = split_prompt({"stop": ["\nTom:"]}, prompt, [], ["\n<START>\n"])
    assert found is not None and found[0] == "plain"
    assert [(t.role, t.name) for t in found[1]] == [
        ("system", None),
        ("user", "Tom"),
        ("assistant", "Ava"),
        ("user", "Tom"),
        ("assistant", "Ava"),
    ]
    assert split_prompt({"stop": ["\nTom:"]}, prompt) is None  # without it: no chat start
