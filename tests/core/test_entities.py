"""The story's entities: read from a scene recap's answer, merged by name and alias, found
where a request mentions them, and given as cards within a budget."""

from __future__ import annotations

from proxy.core.entities import (
    HEADING,
    Entity,
    Fact,
    Mention,
    Mentions,
    capped,
    card,
    cards_within,
    entities_of,
    named_in,
    registry,
)


def words(text: str) -> int:
    return len(text.split())


def test_an_answers_entities_are_read_leniently() -> None:
    answer = [
        {"name": " Brother  Aldric ", "type": "Character", "aliases": ["Aldric", "aldric", ""],
         "facts": ["Keeps the guild ledger.", "  ", "x" * 500]},
        {"name": "The Mill", "type": "building", "facts": "Burned down years ago."},
        {"type": "place", "facts": ["no name: left out"]},
        "Tom",  # not an object
        {"name": "brother aldric", "facts": ["Owes Tom a favour.", "keeps the guild ledger."]},
    ]  # fmt: skip
    assert entities_of(answer) == [
        Mention(
            "Brother Aldric",
            "character",
            ("Aldric",),
            ("Keeps the guild ledger.", "Owes Tom a favour."),
        ),
        Mention("The Mill", "other", (), ("Burned down years ago.",)),
    ]
    for nothing in (None, "entities", {"name": "Tom"}, 3):
        assert entities_of(nothing) == []


def test_mentions_of_one_name_or_alias_are_one_entity() -> None:
    found = registry(
        [
            (30, 60, Mention("Aldric", "other", (), ("Was exiled.",))),
            (10, 20, Mention("Brother Aldric", "character", ("Aldric",), ("Keeps the ledger.",))),
            (20, 40, Mention("BROTHER ALDRIC", "other", ("the monk",), ("Keeps the ledger.",))),
            (20, 40, Mention("The Mill", "place", (), ("Burned down.",))),
            (40, 80, Mention("the monk", "character", (), ("Is alive.",))),
        ]
    )
    aldric, mill = found
    # The earliest mention names it; every other name is an alias; its facts in story
    # order, each once.
    assert aldric.name == "Brother Aldric" and aldric.type == "character"
    assert aldric.aliases == ("Aldric", "the monk")
    assert [(f.text, f.scene) for f in aldric.facts] == [
        ("Keeps the ledger.", 10),
        ("Was exiled.", 30),
        ("Is alive.", 40),
    ]
    burned = (Fact("Burned down.", 20, 40),)
    assert mill == Entity("The Mill", "place", (), burned, from_scenes=burned)


def test_a_card_is_one_line_of_the_entity_and_its_facts() -> None:
    entity = registry([(1, 5, Mention("Aldric", "character", ("the monk",), ("Keeps it.",)))])[0]
    assert card(entity) == "- Aldric (character; also the monk): Keeps it."
    assert card(Entity("Nobody", "other", (), ())) == ""  # no facts: no card


MILL = Entity("The Mill", "place", ("mill",), (Fact("Burned down.", 1, 5),))
ALDRIC = Entity("Brother Aldric", "character", ("Aldric",), (Fact("Keeps the ledger.", 1, 5),))
AL = Entity("Al", "character", (), (Fact("A stranger.", 2, 9),))


def test_mentions_are_whole_words_in_any_case_the_newest_first() -> None:
    mentions = Mentions([MILL, ALDRIC, AL])
    # "Al" is inside "Aldric": not a mention of Al; "MILL," is one of the mill.
    assert mentions.newest_first(["We went to the MILL, then Aldric came."]) == [1, 0]
    assert mentions.newest_first(["Al and the millstone."]) == [2]  # not "mill" in a word
    # Older messages after the newest one's, each entity once.
    assert mentions.newest_first(["Aldric waved.", "The mill stood.", "Ask Aldric."]) == [1, 0]
    assert mentions.newest_first([""]) == [] and Mentions([]).newest_first(["Aldric"]) == []


def test_cards_go_in_mention_order_within_the_budget() -> None:
    many = Entity("Aldric", "character", (), tuple(Fact(f"Fact {i}.", i, i) for i in range(6)))
    # A card over the budget alone keeps its newest facts that fit; none fit: no card.
    assert capped(many, 9, words) == ("- Aldric (character): Fact 3; Fact 4; Fact 5.", 9)
    assert capped(many, 2, words) == ("", 0)
    cards = [capped(entity, 9, words) for entity in (MILL, many, AL)]
    assert cards_within(cards, [2, 0], 100) == (
        f"{HEADING}\n- Al (character): A stranger.\n- The Mill (place; also mill): Burned down.",
        13,
    )
    # Whole cards: the mill's (8 words) fills the budget, Al's does not fit after it; one
    # that does not fit is passed over for the next that does.
    assert cards_within(cards, [0, 2], 8)[0].endswith(
        "\n- The Mill (place; also mill): Burned down."
    )
    assert cards_within(cards, [0, 2], 6)[0] == f"{HEADING}\n- Al (character): A stranger."
    assert cards_within(cards, [], 100) == ("", 0)


def test_a_scene_names_an_entity_by_its_name_or_an_alias_as_a_whole_word() -> None:
    monk = Mention("Brother Aldric", "character", ("the monk",), ("Keeps it.",))
    mill, al = Mention("The Mill", "place"), Mention("Al", "character")
    scene = "Tom met THE MONK by the mill. Aldric's ledger lay open."
    assert named_in([monk, mill, al], scene) == [monk, mill]  # "Al" only inside "Aldric's"
    assert named_in([], scene) == [] and named_in([monk], "") == []
