from __future__ import annotations

from proxy.core.render import Template


def test_macros_are_replaced_case_insensitively_with_padding() -> None:
    t = Template("Recap: {{running_recap}} / {{ Running_Recap }}")
    assert t.render({"running_recap": "wolves"}).text == "Recap: wolves / wolves"
    assert t.macros == {"running_recap"}


def test_unknown_macros_stay_visible() -> None:
    rendered = Template("{{running_recap}} {{char}}").render({"running_recap": "x"})
    assert rendered.text == "x {{char}}"


def test_empty_values_mean_no_content_and_leave_no_holes() -> None:
    t = Template("<R>\n\n{{running_recap}}\n\n{{recent_recaps}}\n</R>")
    empty = t.render({"running_recap": "  ", "recent_recaps": ""})
    assert not empty.has_content
    some = t.render({"running_recap": "Arden met Seraphina.", "recent_recaps": ""})
    assert some.has_content
    assert some.text == "<R>\n\nArden met Seraphina.\n\n</R>"


def test_template_without_macros_has_no_content() -> None:
    # A template that names no memory must not inject itself into every request.
    assert not Template("static text").render({"running_recap": "x"}).has_content
