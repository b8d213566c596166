"""How a message's text is recognised however a request carries it."""

from __future__ import annotations

import random

from proxy.core.fingerprints import fingerprint, index_message, readings


def test_a_messages_fingerprints_are_those_of_each_way_a_request_carries_it() -> None:
    # `index_message` normalises each text once; what it gives must be what fingerprinting
    # every variant whole gives, whatever the whitespace (ST keeps it as typed).
    rng = random.Random(3)
    pieces = ["a", "Ava", "{{char}}", "{{USER}}", "{{user}}", ":", "é", " ", "  ", "\n", "\t",
              "\u00a0", "\u2003", ""]  # fmt: skip
    for _ in range(3000):
        name = "".join(rng.choices(pieces, k=rng.randint(0, 3)))
        text = "".join(rng.choices(pieces, k=rng.randint(0, 8)))
        char, user = rng.choice(["", "Sera"]), rng.choice(["", "Alex", " Al  ex "])
        variants = {text, f"{name}: {text}"}
        if "{{" in text:
            filled = text
            for macro, value in (("{{char}}", char or name), ("{{user}}", user)):
                if value:
                    filled = filled.replace(macro, value).replace(macro.upper(), value)
            variants |= {filled, f"{name}: {filled}"}
        message = index_message(0, False, name, text, char=char, user=user)
        assert sorted(message.fps) == sorted({fingerprint(v) for v in variants}), (name, text)
        assert message.text == " ".join(text.split())


def test_a_request_text_is_read_as_it_is_and_past_a_speakers_name() -> None:
    assert readings("Seraphina: The glade.") == ("Seraphina: The glade.", "The glade.")
    assert readings("The glade: a clearing.") == ("The glade: a clearing.", "a clearing.")
    assert readings("No name here.") == ("No name here.",)
    assert readings("Seraphina: ") == ("Seraphina: ",)  # nothing after the name
    long = "x" * 41 + ": text"
    assert readings(long) == (long,)  # longer than a name
