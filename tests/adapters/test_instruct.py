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
    assert template.block("system", "x") == "<<S>>x<<END>>\n"
    assert Template.from_st({**custom, "enabled": False}) is None
    assert Template.from_st({**custom, "output_sequence": "<<H>>"}) is None  # one opener
    assert Template.from_st({**custom, "input_sequence": "  "}) is None


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
