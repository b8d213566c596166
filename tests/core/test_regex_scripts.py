"""ST's regex scripts as ST runs them on a prompt: JavaScript's patterns and replacements
read into Python's, only the scripts that alter the outgoing prompt, on the messages and
depths they name."""

from __future__ import annotations

from typing import Any

from proxy.core.regex_scripts import prompt_scripts

NAMES = {"user": "Tom", "char": "Ava"}


def script(**fields: Any) -> dict[str, Any]:
    return {"scriptName": "s", "findRegex": "/x/g", "replaceString": "", "trimStrings": [],
            "placement": [1, 2], "disabled": False, "markdownOnly": False,
            "promptOnly": True, **fields}  # fmt: skip


def run(scripts: list[dict[str, Any]], text: str, *, is_user: bool = False,
        depth: int | None = None) -> str:  # fmt: skip
    return prompt_scripts(scripts).apply(text, is_user=is_user, depth=depth, names=NAMES)


def test_a_status_block_is_cut_as_st_cuts_it_from_the_prompt() -> None:
    status = script(findRegex=r"/<status>[\s\S]*?<\/status>/g", placement=[2])
    text = "She smiles. <status>HP 3</status> Then <status>HP 2</status> she waits."
    assert run([status], text) == "She smiles.  Then  she waits."
    assert run([status], text, is_user=True) == text  # placement: the AI's messages only


def test_only_scripts_that_alter_the_outgoing_prompt_run() -> None:
    """A script marked neither promptOnly nor markdownOnly ran when the message was saved
    (the file holds its result); a markdown-only or disabled one never touches a prompt."""
    kinds = [script(promptOnly=False), script(promptOnly=False, markdownOnly=True),
             script(disabled=True)]  # fmt: skip
    assert run(kinds, "xox") == "xox"
    assert run([script()], "xox") == "o"


def test_flags_groups_trim_strings_and_macros() -> None:
    assert run([script(findRegex="/x/")], "xox") == "ox"  # no `g`: the first match only
    assert run([script(findRegex="/X/gi")], "xox") == "o"
    swap = script(findRegex=r"/(\w+)-(\w+)/g", replaceString="$2-$1 {{match}}")
    assert run([swap], "ab-cd") == "cd-ab ab-cd"
    named = script(findRegex=r"/(?<word>\d+)!/g", replaceString="[$1]")
    assert run([named], "12! 3!") == "[12] [3]"
    trim = script(findRegex=r"/\*(.+?)\*/g", replaceString="$1", trimStrings=["{{char}} "])
    assert run([trim], "*Ava waves*") == "waves"
    macro = script(findRegex="/{{user}}/g", replaceString="{{char}}", substituteRegex=1)
    assert run([macro], "Tom sits.") == "Ava sits."
    # A name with a regex character in it: escaped, it is matched as written.
    dotted = {"user": "A.b", "char": "Ava"}
    for substitute, expected in ((1, "! !"), (2, "! Axb")):
        named_user = script(findRegex="/{{user}}/g", replaceString="!", substituteRegex=substitute)
        scripts = prompt_scripts([named_user])
        assert scripts.apply("A.b Axb", is_user=True, depth=0, names=dotted) == expected
    bare = script(findRegex="[0-9]+", replaceString="#")
    assert run([bare], "a1b22") == "a#b22"  # not in slashes: the pattern alone, no flags


def test_depth_limits_keep_the_newest_status_as_st_does() -> None:
    older_only = script(findRegex="/x/g", minDepth=1)
    assert run([older_only], "xox", depth=0) == "xox"
    assert run([older_only], "xox", depth=3) == "o"
    assert run([script(maxDepth=2)], "xox", depth=5) == "xox"
    assert run([older_only], "xox", depth=None) == "o"  # depth unknown: every depth counts


def test_a_pattern_python_cannot_read_is_left_out_and_named() -> None:
    found = prompt_scripts([script(scriptName="bad", findRegex="/(?<=a+)b/g"), script()])
    assert len(found.scripts) == 1 and "bad" in found.problems[0]
