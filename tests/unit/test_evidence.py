"""Evidence-set selection (``hybridsag.paths.evidence``) on constructed candidate lists: names,
question shape, the greedy coverage order, and the gaps a second hop looks up.

The passages and probabilities are written by hand so that the judge's own order is wrong in a
known way; each test says which set must come first.
"""

from __future__ import annotations

import pytest
from hybridsag.paths.evidence import (
    EvidencePassage,
    bridge_gaps,
    fold,
    name_forms,
    question_shape,
    select_evidence,
)


def _p(cid: str, title: str, text: str, p: float) -> EvidencePassage:
    return EvidencePassage(cid, title, text, p)


#: Two films, each with its director's passage, and the distractors a judge likes: an album of
#: the same name, a festival passage full of the question's words, another director. The
#: probabilities are of the size the offline judge gives such passages.
FILM_A = _p("film-a", "Amber Road", "Amber Road is a 1950 British drama film directed by Harold "
            "Penn. It was released in March 1950.", 0.18)
ALBUM_A = _p("album-a", "Amber Road (album)", "Amber Road is the second album by the band Glass "
             "Harbour, released in 1998.", 0.57)
FESTIVAL = _p("festival", "Amber Road Festival", "The Amber Road Festival screens a film each "
              "summer; the film Amber Road opened it.", 0.12)
FILM_B = _p("film-b", "Crimson Lake", "Crimson Lake is a 1962 mystery film directed by Vera "
            "Lindqvist, set on a frozen lake.", 0.16)
DIRECTOR_A = _p("penn", "Harold Penn", "Harold Penn (4 May 1901 - 1977) was an English director "
                "born in Bristol.", 0.03)
DIRECTOR_B = _p("lindqvist", "Vera Lindqvist", "Vera Lindqvist (born 1925) is a Swedish "
                "screenwriter and director from Uppsala.", 0.02)
OTHER_DIRECTOR = _p("other", "Mira Olsen", "Mira Olsen is a Danish director born in Aarhus, "
                    "known for her film work.", 0.05)


def _order(question: str, passages: list[EvidencePassage], **kw: float) -> list[str]:
    ranked = sorted(passages, key=lambda p: -p.p)  # the judge's order
    return select_evidence(question, ranked, **kw).order  # type: ignore[arg-type]


# --------------------------------------------------------------------------- names


def test_name_forms_drop_disambiguation_and_keep_a_long_head() -> None:
    assert name_forms("Amber Road (album)") == ("amber road (album)", "amber road")
    assert name_forms("Sancha of Castile, Queen of Navarre") == (
        "sancha of castile, queen of navarre",
        "sancha of castile",
    )
    assert name_forms("Johnnycake, West Virginia") == ("johnnycake, west virginia",)  # one word
    assert name_forms("Ur") == ()


def test_fold_drops_accents_one_character_for_one() -> None:
    assert fold("Aldri Annet Enn Bråk") == "aldri annet enn brak"
    assert len(fold("Ærøskøbing straße")) == len("Ærøskøbing straße")


# --------------------------------------------------------------------------- question shape


def test_a_comparison_names_two_entities() -> None:
    shape = question_shape(
        "Which film came out first, Amber Road or Crimson Lake?", [FILM_A, ALBUM_A, FILM_B]
    )
    assert shape.entities == ("amber road", "crimson lake")
    assert shape.about == {"film-a": 0, "album-a": 0, "film-b": 1}
    assert shape.kind == "comparison"
    assert shape.kind_words == {"film"}
    assert shape.off_kind == {"album-a"}  # the question asks about a film


def test_a_name_inside_a_longer_name_is_not_an_entity() -> None:
    town = _p("t", "Johnnycake, West Virginia", "Johnnycake is a community.", 0.9)
    state = _p("s", "West Virginia", "West Virginia is a state.", 0.5)
    shape = question_shape("Which county borders Johnnycake, West Virginia?", [town, state])
    assert shape.entities == ("johnnycake, west virginia",)
    assert shape.about == {"t": 0}


def test_a_lowercase_common_word_is_not_an_entity() -> None:
    water = _p("w", "Water", "Water covers most of the Earth.", 0.9)
    shape = question_shape("Which river carries the most water?", [water])
    assert shape.entities == () and shape.kind == "open"


def test_accents_do_not_hide_an_entity() -> None:
    ballet = _p("b", "Aschenbrödel", "Aschenbrödel is a ballet by Johann Strauss II.", 0.5)
    shape = question_shape("Who composed Aschenbrodel?", [ballet])
    assert shape.entities == ("aschenbrodel",)


# --------------------------------------------------------------------------- the set first


def test_comparison_takes_each_entity_before_a_second_passage_on_one() -> None:
    q = "Which film came out first, Amber Road or Crimson Lake?"
    judge_order = [p.chunk_id for p in sorted([FILM_A, ALBUM_A, FESTIVAL, FILM_B], key=lambda p: -p.p)]
    assert set(judge_order[:2]) != {"film-a", "film-b"}  # the judge alone misses the pair
    assert set(_order(q, [FILM_A, ALBUM_A, FESTIVAL, FILM_B])[:2]) == {"film-a", "film-b"}


def test_bridge_takes_the_entity_the_evidence_names_on_the_relation() -> None:
    q = "Where was the director of film Amber Road born?"
    passages = [FILM_A, ALBUM_A, FESTIVAL, DIRECTOR_A, OTHER_DIRECTOR]
    order = _order(q, passages)
    assert order[:2] == ["film-a", "penn"]
    sel = select_evidence(q, sorted(passages, key=lambda p: -p.p))
    assert sel.roles["film-a"] == "entity" and sel.roles["penn"] == "bridge"
    assert sel.bridges["film-a"] == ["penn"]
    assert sel.kind == "entity+bridge"


def test_bridge_comparison_puts_all_four_first() -> None:
    q = "Which film has the director born earlier, Amber Road or Crimson Lake?"
    passages = [FILM_A, ALBUM_A, FESTIVAL, FILM_B, DIRECTOR_A, DIRECTOR_B, OTHER_DIRECTOR]
    order = _order(q, passages)
    assert set(order[:4]) == {"film-a", "film-b", "penn", "lindqvist"}


def test_the_relation_word_must_stand_next_to_the_name() -> None:
    """The film's sentence names its director and two actors; only the director is named next
    to the question's relation word, though the judge likes an actor better."""
    film = _p("film", "Quiet Harbor", "Quiet Harbor is a 1961 drama film directed by Tomas Varga "
              "and starring Nora Vale and Otto Brandt.", 0.6)
    director = _p("varga", "Tomas Varga", "Tomas Varga was a Hungarian filmmaker.", 0.02)
    actor = _p("vale", "Nora Vale", "Nora Vale (born 1930 in Leeds) was an English actress.", 0.05)
    other = _p("brandt", "Otto Brandt", "Otto Brandt was a German actor born in Kiel.", 0.04)
    q = "Where was the director of film Quiet Harbor born?"
    assert _order(q, [film, director, actor, other])[:2] == ["film", "varga"]


def test_a_passage_says_the_relation_its_own_way() -> None:
    """"mother" in the question, "son of ... and Ermengarde" in the passage: a relation cue,
    counted across the run of capitalised words between them."""
    king = _p("king", "Lothair II", "Lothair II was the son of Emperor Lothair I and Ermengarde "
              "of Tours. He married Teutberga.", 0.8)
    mother = _p("mother", "Ermengarde of Tours", "Ermengarde of Tours died in 851.", 0.02)
    wife = _p("wife", "Teutberga", "Teutberga was a queen of Lotharingia. She died in 875.", 0.06)
    assert _order("When did Lothair II's mother die?", [king, mother, wife])[:2] == [
        "king",
        "mother",
    ]
    # an in-law is reached through the marriage, not the parents
    assert _order("Who is the father-in-law of Lothair II?", [king, mother, wife])[:2] == [
        "king",
        "wife",
    ]


def test_a_comparison_takes_the_second_entity_before_a_bridge() -> None:
    q = "Which film came out first, Amber Road or Crimson Lake?"
    order = _order(q, [FILM_A, FILM_B, DIRECTOR_A, DIRECTOR_B])
    assert set(order[:2]) == {"film-a", "film-b"}  # "came out" is not the director relation


def test_nothing_named_keeps_the_judge_order() -> None:
    q = "how do lighthouses guide ships at night"
    passages = [
        _p("a", "Lighthouse", "A lighthouse guides ships. See Fresnel Lens.", 0.6),
        _p("c", "Harbor", "Ships guide themselves by a lighthouse at night.", 0.4),
        _p("b", "Fresnel Lens", "A Fresnel lens focuses light.", 0.1),
    ]
    sel = select_evidence(q, passages)
    # "Fresnel Lens" is named by the top passage, but not on a relation word of the question:
    # its bridge counts relation_floor, not enough to pass a passage four times as likely
    assert sel.order == ["a", "c", "b"]
    assert select_evidence(q, passages, k=0).order == ["a", "c", "b"]


def test_weights_zero_give_the_judge_order() -> None:
    q = "Where was the director of film Amber Road born?"
    passages = sorted([FILM_A, ALBUM_A, FESTIVAL, DIRECTOR_A], key=lambda p: -p.p)
    sel = select_evidence(q, passages, entity_weight=0, bridge_weight=0, relation_floor=1.0)
    assert sel.order == [p.chunk_id for p in passages]


def test_equal_gains_keep_the_judge_order_and_repeat_exactly() -> None:
    passages = [_p(c, f"Title {c}", "plain text", 0.5) for c in "edcba"]
    first = select_evidence("anything at all", passages).order
    assert first == list("edcba")
    assert all(select_evidence("anything at all", passages).order == first for _ in range(5))


def test_bad_arguments_name_the_value() -> None:
    with pytest.raises(ValueError, match="-1"):
        select_evidence("q", [], k=-1)
    with pytest.raises(ValueError, match="relation_floor must be in 0..1, got 2"):
        select_evidence("q", [], relation_floor=2)


# --------------------------------------------------------------------------- second hop


def test_gaps_are_names_on_the_relation_that_no_candidate_is_about() -> None:
    q = "Where was the director of film Amber Road born?"
    passages = sorted([FILM_A, ALBUM_A, FESTIVAL], key=lambda p: -p.p)
    sel = select_evidence(q, passages)
    # the director, then a capitalised adjective (a lookup that finds no title)
    assert bridge_gaps(sel, {p.chunk_id: p for p in passages}) == ["harold penn", "british"]
    # once a candidate is about the director, there is no gap left
    full = sorted([FILM_A, ALBUM_A, FESTIVAL, DIRECTOR_A], key=lambda p: -p.p)
    sel = select_evidence(q, full)
    assert "harold penn" not in bridge_gaps(sel, {p.chunk_id: p for p in full})


def test_no_gap_without_a_named_entity() -> None:
    passages = [FESTIVAL]
    sel = select_evidence("what opens the festival each summer", passages)
    assert bridge_gaps(sel, {p.chunk_id: p for p in passages}) == []
