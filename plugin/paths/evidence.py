"""Evidence-set selection: order the judge's candidates as a set that covers the question.

A judge scores each passage alone; a multi-hop answer needs a *set*: a comparison question
("Which film came out first, A or B?") needs a passage about each entity it names, a bridge
question ("Where was the director of film A born?") needs the passage about A and the passage
about the entity A's passage names (its director), a bridge-comparison needs both. This module
reads that shape from the question's text and the candidates themselves (never from a label)
and fills the first ``k`` slots greedily by a coverage objective over the judge's probabilities.

**Names.** Text is compared :func:`fold`-ed (lowercase, accents dropped). A passage is *about*
the names of its title (:func:`name_forms`: the title, the title without a trailing ``(film)``,
and the part before a comma when that has two words or more); a text *names* a passage when
one of these occurs in it whole-word and written as a name of its own: with a capital letter or
a digit, and not inside a longer run of capitalised words (``Virginia`` in ``West Virginia``).

**Question shape** (:func:`question_shape`): the question's *entities* are the spans of the
question that a candidate's title matches, where the span holds a capital letter or a digit
and is not inside a longer matched span (two or more entities: a comparison; each needs a
passage about it). Its *kind words* name the kind of thing asked about: the word after an
opening ``which``/``what`` and the word right before an entity (``film`` in "Which film ..."
and in "the director of film A"). Its *relation words* are its other content words
(``director``, ``born``, ``mother``), compared by stem (the first :data:`STEM` letters:
``directed`` ~ ``director``). A passage about an entity whose ``(...)`` and first sentence share
no kind word, while another passage about the same entity does, is *off-kind* (the album when
the question asks about the film): it counts :data:`OFF_KIND_SHARE` of its probability and
covers nothing.

**Bridges.** A selected passage *opens a bridge* to each candidate it names, except candidates
about a question entity or about its own title. The bridge is *on the relation* when a relation
word of the question stands within :data:`RELATION_WINDOW` words of the name, in the same
sentence ("directed by Harold Penn"); otherwise it counts
``relation_floor`` as much.

**Objective** (:func:`select_evidence`). Each need (an entity; a bridge opened by a selected
passage) is covered with the probability that a selected passage serving it is right,
``1 - prod(1 - p)``. The greedy step takes the candidate with the largest

    p(c) * (1 + entity_weight * open(entity of c)
               + sum over selected s naming c: bridge_weight * rel(s, c) * sure(s) * open(s))

where ``open`` is the probability that the need is still uncovered (1 before any passage
serves it) and ``sure(s)`` is the source's probability, or, for a passage about a named entity,
its share of the probability of the passages about that entity (the question names it, so one
of them is right). A candidate that serves no need keeps its own probability: when the question
names nothing and the evidence opens nothing on the relation, the judge's order stands. Greedy
selection for a coverage objective follows Nemhauser, Wolsey and Fisher (1978); the objective
and its weights are this module's choice, set on musique100 and constructed cases.

:func:`bridge_gaps` names what a targeted second hop should look up: the names the selected
passages use on the relation that no candidate is about.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from hybridsag.fusion.text.sentences import name_spans, split_sentences

__all__ = [
    "OFF_KIND_SHARE",
    "RELATION_CUES",
    "RELATION_WINDOW",
    "STEM",
    "EvidencePassage",
    "QuestionShape",
    "Selection",
    "bridge_gaps",
    "fold",
    "name_forms",
    "question_shape",
    "reads_multi_hop",
    "select_evidence",
]

#: Letters of a word compared as its stem (``direct`` for ``director``/``directed``): a crude
#: prefix stem, enough for English relation words and harmless elsewhere.
STEM = 5
#: Words on either side of a name in which a relation word puts the name on the relation: the
#: relation a sentence gives a name is said next to it ("directed by A, starring B and C" says
#: nothing of C's directing).
RELATION_WINDOW = 4
_KIN = frozenset({"son", "daugh", "child", "fathe", "mothe", "paren", "heir"})
_MARRIAGE = frozenset({"marri", "wife", "husba", "spous", "widow"})
_KIN_WORDS = frozenset({"fathe", "mothe", "paren", "grand", "pater", "mater"})
#: How a passage says a relation the question asks about (stems of general English, as
#: encyclopedia text phrases them): a question about someone's father meets "son of Y" or "his
#: father Y"; about a spouse, "married Y"; about an author or performer, "written by Y",
#: "recorded by the band Y". A stem here counts beside the question's own relation words.
RELATION_CUES: Mapping[str, frozenset[str]] = {
    **{stem: _KIN for stem in _KIN_WORDS | {"son", "daugh", "child"}},
    **{stem: _MARRIAGE for stem in _MARRIAGE},
    **{stem: frozenset({"by", "writt", "wrote", "write", "autho"}) for stem in ("autho", "write")},
    **{
        stem: frozenset({"by", "sung", "recor", "perfo", "singe", "band", "rappe", "group"})
        for stem in ("perfo", "singe", "artis")
    },
    "compo": frozenset({"by", "compo"}),
    "produ": frozenset({"by", "produ"}),
    "found": frozenset({"found", "estab"}),
}
#: The share of its probability an off-kind passage keeps (about a named entity, but not of
#: the kind the question asks for, while another passage about the entity is).
OFF_KIND_SHARE = 0.3
#: Shortest name form matched (``Ur`` would match everywhere).
_MIN_NAME = 3
#: How much of a passage is read for its first sentence.
_FIRST_SENTENCE_CHARS = 400

_WORD = re.compile(r"\w+")
_WINDOW_TOKEN = re.compile(r"[A-Z][\w'’\-]*(?:\s+[A-Z][\w'’\-]*)*|\w+")
_DISAMBIGUATION = re.compile(r"\s*\([^)]*\)\s*$")
_CAP_RUN = re.compile(
    r"\b[A-Z][\w'’\-]*(?:\s+(?:of|de|la|le|von|van|the|du|da|di|del|y|and|&)?\s*[A-Z][\w'’\-]*)*"
)
#: Function words never taken as relation words (English; the relation test is English-only in
#: effect, other languages keep their bridges at ``relation_floor``).
_FUNCTION_WORDS = frozenset(
    """a an the of in on at to for from by with and or but nor is are was were be been being am
    who whom whose what which when where why how did do does done has have had that this these
    those it its as than then there their they he she his her him hers them both same also more
    most less least first earlier later older younger longer shorter before after s not no
    yes whether one two""".split()
)


@dataclass(frozen=True, slots=True)
class EvidencePassage:
    """A judged candidate: its chunk id, title, text and the judge's probability."""

    chunk_id: str
    title: str
    text: str
    p: float


@dataclass(frozen=True, slots=True)
class QuestionShape:
    """What the question names: ``entities`` (lowercased question spans, in question order),
    ``about`` (chunk id -> index of the entity the passage is about) and ``relation`` (stems of
    the question's content words outside the entities)."""

    entities: tuple[str, ...]
    about: Mapping[str, int]
    relation: frozenset[str]
    #: stems of the kind of thing the question asks about (``film`` in "Which film ..." and in
    #: "the director of film A"): not relation words
    kind_words: frozenset[str] = frozenset()
    #: passages about an entity whose kind does not fit the question while another passage
    #: about the same entity does (the album when the question asks about the film)
    off_kind: frozenset[str] = frozenset()

    @property
    def kind(self) -> str:
        """``"comparison"`` (two or more entities), ``"entity"`` (one) or ``"open"`` (none)."""
        if len(self.entities) >= 2:
            return "comparison"
        return "entity" if self.entities else "open"


@dataclass(frozen=True, slots=True)
class Selection:
    """The selected order (every candidate once: the greedy head, then the rest in the judge's
    order), each head passage's role (``"entity"``, ``"bridge"`` or ``"judge"``: the need it
    was taken for), the bridges each selected passage opened (chunk id -> named chunk ids) and
    the question's shape."""

    order: list[str]
    roles: dict[str, str]
    shape: QuestionShape
    bridges: dict[str, list[str]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The shape as evidence showed it: ``comparison``/``entity``/``open``, with
        ``+bridge`` when a passage was taken for a bridge."""
        base = self.shape.kind
        return base + "+bridge" if "bridge" in self.roles.values() else base


def fold(text: str) -> str:
    """``text`` lowercased with accents dropped, one character for one (``Bråk`` -> ``brak``),
    so that spans found in the folded text are spans of the original."""
    return "".join(_fold_char(ch) for ch in text)


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    low = ch.lower()
    if len(low) != 1:
        return ch
    if low.isascii():
        return low
    base = "".join(c for c in unicodedata.normalize("NFKD", low) if not unicodedata.combining(c))
    return base if len(base) == 1 else low


@lru_cache(maxsize=1 << 16)
def name_forms(title: str) -> tuple[str, ...]:
    """The names a passage with ``title`` is about (:func:`fold`-ed): the title, the title
    without a trailing ``(...)``, and the part before a comma when it has two words or more;
    forms shorter than three characters are left out.

    >>> name_forms("Sancha of Castile, Queen of Navarre (film)")
    ('sancha of castile, queen of navarre (film)', 'sancha of castile, queen of navarre', 'sancha of castile')
    """
    full = fold(" ".join(title.split()))
    forms = [full]
    bare = _DISAMBIGUATION.sub("", full).strip()
    forms.append(bare)
    if "," in bare:
        head = bare.split(",", 1)[0].strip()
        if len(head.split()) >= 2:
            forms.append(head)
    return tuple(f for f in dict.fromkeys(forms) if len(f) >= _MIN_NAME)


def _is_name(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is written as a name of its own: it holds an upper-case
    letter or a digit, and the words right before and after it are not capitalised (``Virginia``
    in ``West Virginia`` is part of a longer name)."""
    if not any(ch.isupper() or ch.isdigit() for ch in text[start:end]):
        return False
    before = text[:start].rstrip()
    if len(before) < start:  # a space before: look at the previous word
        prev = before.rsplit(None, 1)[-1] if before else ""
        if prev[:1].isupper() and prev[-1:].isalnum():
            return False
    after = text[end:]
    if after[:1].isspace():
        nxt = after.split(None, 1)[0] if after.strip() else ""
        if nxt[:1].isupper():
            return False
    return True


def _mentions(forms: Sequence[str], text: str, text_folded: str) -> bool:
    """Whether ``text`` names one of ``forms`` as a name of its own (:func:`_is_name`)."""
    for form in forms:
        if form not in text_folded:
            continue
        for start, end in name_spans(form, text_folded):
            if _is_name(text, start, end):
                return True
    return False


def _stems(text: str) -> set[str]:
    return {
        w[:STEM]
        for w in _WORD.findall(text.lower())
        if len(w) >= 3 and not w.isdigit() and w not in _FUNCTION_WORDS
    }


def question_shape(question: str, passages: Sequence[EvidencePassage]) -> QuestionShape:
    """The entities the question names that some passage is about, and its relation words.

    A match is a whole-word, case-insensitive occurrence of one of a passage's
    :func:`name_forms` in the question whose text holds an upper-case letter or a digit; only
    the longest matches are kept (``West Virginia`` inside ``Johnnycake, West Virginia`` is not
    an entity of its own) and overlapping ones are merged into one entity.
    """
    ql = fold(question)
    matched: dict[str, tuple[int, int]] = {}
    for p in passages:
        best: tuple[int, int] | None = None
        for form in name_forms(p.title):
            if form not in ql:
                continue
            for span in name_spans(form, ql):
                if not any(ch.isupper() or ch.isdigit() for ch in question[span[0] : span[1]]):
                    continue
                if best is None or span[1] - span[0] > best[1] - best[0]:
                    best = span
        if best is not None:
            matched[p.chunk_id] = best
    spans = set(matched.values())
    maximal = {s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)}
    groups: list[list[int]] = []
    for start, end in sorted(maximal):
        if groups and start < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
        else:
            groups.append([start, end])
    about: dict[str, int] = {}
    for cid, (start, end) in matched.items():
        if (start, end) not in maximal:
            continue
        for i, (g0, g1) in enumerate(groups):
            if g0 <= start and end <= g1:
                about[cid] = i
    rest = question
    for g0, g1 in reversed(groups):
        rest = rest[:g0] + " " + rest[g1:]
    kind = frozenset(_kind_stems(ql, groups))
    return QuestionShape(
        entities=tuple(ql[g0:g1] for g0, g1 in groups),
        about=about,
        relation=_with_cues(_stems(rest) - kind),
        kind_words=kind,
        off_kind=_off_kind(about, passages, kind),
    )


def _kind_stems(question_folded: str, groups: Sequence[Sequence[int]]) -> set[str]:
    """Stems of the words naming the kind of thing asked about: the word after an opening
    ``which``/``what`` and the word right before each entity (``film`` in "of film A")."""
    words: list[str] = []
    first = _WORD.findall(question_folded[:40])
    if len(first) >= 2 and first[0] in ("which", "what"):
        words.append(first[1])
    for g0, _g1 in groups:
        before = _WORD.findall(question_folded[:g0])
        if before:
            words.append(before[-1])
    return _stems(" ".join(words))


def _off_kind(
    about: Mapping[str, int], passages: Sequence[EvidencePassage], kind: frozenset[str]
) -> frozenset[str]:
    """The passages about an entity whose kind (the title's ``(...)`` and the first sentence)
    shares no stem with the question's ``kind`` words, for entities where another passage's
    does."""
    if not kind:
        return frozenset()
    fits: dict[str, bool] = {}
    for p in passages:
        if p.chunk_id in about:
            note = _DISAMBIGUATION.search(p.title)
            sentences = split_sentences(p.text[:_FIRST_SENTENCE_CHARS])
            text = (note.group() if note else "") + " " + (sentences[0] if sentences else "")
            fits[p.chunk_id] = bool(kind & _stems(text))
    fitting = {about[c] for c, ok in fits.items() if ok}
    return frozenset(c for c, ok in fits.items() if not ok and about[c] in fitting)


def _near_relation(text: str, start: int, end: int, relation: frozenset[str]) -> bool:
    """Whether a relation stem (or one of its :data:`RELATION_CUES`, which the shape has added
    to ``relation``) is among the :data:`RELATION_WINDOW` words on either side of
    ``text[start:end]`` ("directed by Harold Penn", "Harold Penn, his father"); a run of
    capitalised words counts as one word ("son of Emperor Lothair I and Ermengarde")."""
    before = _WINDOW_TOKEN.findall(text[:start])[-RELATION_WINDOW:]
    after = _WINDOW_TOKEN.findall(text[end:])[:RELATION_WINDOW]
    return any(fold(w)[:STEM] in relation for token in before + after for w in _WORD.findall(token))


def _with_cues(relation: set[str]) -> frozenset[str]:
    """``relation`` with the words a passage uses for it (:data:`RELATION_CUES`); a question
    about an in-law asks for the marriage, not the parents."""
    out = set(relation)
    in_law = "law" in relation and bool(relation & _KIN_WORDS)
    for stem in relation:
        cues = RELATION_CUES.get(stem, frozenset())
        if in_law and stem in _KIN_WORDS:
            cues = RELATION_CUES["marri"]
        out |= cues
    return frozenset(out)


def _on_relation(
    forms: Sequence[str], sentences: Sequence[tuple[str, str]], relation: frozenset[str]
) -> bool:
    """Whether a sentence ``(text, folded)`` names one of ``forms`` (as a name of its own)
    near a relation word (:func:`_near_relation`)."""
    for text, folded in sentences:
        for form in forms:
            if form not in folded:
                continue
            for start, end in name_spans(form, folded):
                if _is_name(text, start, end) and _near_relation(text, start, end, relation):
                    return True
    return False


def select_evidence(
    question: str,
    passages: Sequence[EvidencePassage],
    *,
    k: int = 10,
    entity_weight: float = 3.0,
    bridge_weight: float = 40.0,
    relation_floor: float = 0.1,
) -> Selection:
    """Fill the first ``k`` slots by the greedy coverage objective of the module docstring.

    Args:
        question: the user's question.
        passages: the judged candidates in the judge's order (best first).
        k: slots filled greedily; the rest follow in the judge's order.
        entity_weight: how much an open entity need adds to a passage about it (0 turns the
            entity needs off, and with them the holding back of off-kind passages).
        bridge_weight: how much an open bridge adds to a passage it names (0 turns bridges off).
        relation_floor: the share of ``bridge_weight`` a bridge gets when the name is not next
            to a relation word of the question.

    Returns:
        A :class:`Selection`; its ``order`` holds every passage once. Equal gains keep the judge's
        order, so the result is deterministic.

    Raises:
        ValueError: a negative ``k`` or weight, or ``relation_floor`` outside 0..1.

    Example:
        >>> ps = [EvidencePassage("a1", "Alpha", "Alpha is a film.", 0.9),
        ...       EvidencePassage("a2", "Alpha (song)", "Alpha is a song.", 0.6),
        ...       EvidencePassage("b", "Beta", "Beta is a film.", 0.4)]
        >>> select_evidence("Which came first, Alpha or Beta?", ps).order
        ['a1', 'b', 'a2']
    """
    if k < 0 or entity_weight < 0 or bridge_weight < 0:
        raise ValueError(
            f"k, entity_weight and bridge_weight must be >= 0, got {k}, {entity_weight}, "
            f"{bridge_weight}"
        )
    if not 0.0 <= relation_floor <= 1.0:
        raise ValueError(f"relation_floor must be in 0..1, got {relation_floor}")
    shape = question_shape(question, passages)
    by_id = {p.chunk_id: p for p in passages}
    # a passage about a named entity is that entity's passage with its share of the judge's
    # probability among the passages about it: one of them is (the question names it)
    entity_mass = [0.0] * len(shape.entities)
    for p in passages:
        if p.chunk_id in shape.about and p.chunk_id not in shape.off_kind:
            entity_mass[shape.about[p.chunk_id]] += p.p
    sure = {
        c: min(1.0, by_id[c].p / entity_mass[e])
        for c, e in shape.about.items()
        if c not in shape.off_kind and entity_mass[e] > 0
    }
    open_entity = [1.0] * len(shape.entities)
    open_source: dict[str, float] = {}
    named_by: dict[str, list[tuple[str, float]]] = {}  # chunk id -> [(source, relation weight)]
    rest = [p.chunk_id for p in passages]
    order: list[str] = []
    roles: dict[str, str] = {}
    bridges: dict[str, list[str]] = {}
    for _slot in range(min(k, len(rest))):
        best_i, best_gain, best_role = 0, -1.0, "judge"
        for i, cid in enumerate(rest):
            p = by_id[cid].p
            gain, role, need = 1.0, "judge", 0.0
            ent = shape.about.get(cid)
            if entity_weight and cid in shape.off_kind:
                p *= OFF_KIND_SHARE  # about the entity, not of the kind the question asks for
            elif ent is not None and entity_weight:
                need = entity_weight * open_entity[ent]
                gain += need
                role = "entity" if need > 0 else role
            for source, rel in named_by.get(cid, ()):
                b = bridge_weight * rel * sure.get(source, by_id[source].p) * open_source[source]
                gain += b
                if b > need:
                    role, need = "bridge", b
            gain *= p
            if gain > best_gain:
                best_i, best_gain, best_role = i, gain, role
        cid = rest.pop(best_i)
        order.append(cid)
        roles[cid] = best_role
        chosen = by_id[cid]
        ent = shape.about.get(cid)
        if ent is not None and cid not in shape.off_kind:
            open_entity[ent] *= 1.0 - chosen.p
        for source, _rel in named_by.get(cid, ()):
            open_source[source] *= 1.0 - chosen.p
        if bridge_weight:
            opened = _open_bridges(chosen, rest, by_id, shape)
            if opened:
                open_source[cid] = 1.0
                bridges[cid] = [c for c, _ in opened]
                for other, rel in opened:
                    named_by.setdefault(other, []).append((cid, rel if rel else relation_floor))
    return Selection(order + rest, roles, shape, bridges)


def _open_bridges(
    source: EvidencePassage,
    candidates: Sequence[str],
    by_id: Mapping[str, EvidencePassage],
    shape: QuestionShape,
) -> list[tuple[str, float]]:
    """The candidates ``source`` names: (chunk id, 1.0 on the relation else 0.0)."""
    text = source.text
    text_f = fold(text)
    own = set(name_forms(source.title))
    sentences: list[tuple[str, str]] | None = None
    out = []
    for cid in candidates:
        if cid in shape.about:
            continue
        forms = name_forms(by_id[cid].title)
        if not forms or own.intersection(forms) or not _mentions(forms, text, text_f):
            continue
        if sentences is None:
            sentences = [(s, fold(s)) for s in split_sentences(text)] or [(text, text_f)]
        out.append((cid, 1.0 if _on_relation(forms, sentences, shape.relation) else 0.0))
    return out


def bridge_gaps(
    selection: Selection,
    passages: Mapping[str, EvidencePassage],
    *,
    sources: int = 2,
) -> list[str]:
    """Names a targeted second hop should look up: in the first ``sources`` passages taken for
    an entity, the capitalised names in sentences on the question's relation that no candidate
    is about (and that are not the question's entities nor the passage's own title). A name is
    a run of capitalised words (inner ``of``, ``de``, ``von`` ... allowed) without leading
    function words, written as a name of its own; a one-word name that opens its sentence is
    left out (``Today``). :func:`fold`-ed, in the order found, without repeats."""
    shape = selection.shape
    if not shape.relation:
        return []
    known = {f for p in passages.values() for f in name_forms(p.title)}
    known.update(shape.entities)
    out: list[str] = []
    taken = [c for c in selection.order if selection.roles.get(c) == "entity"][:sources]
    for cid in taken:
        source = passages[cid]
        own = name_forms(source.title)
        for sentence in split_sentences(source.text):
            if not shape.relation & {fold(w)[:STEM] for w in _WORD.findall(sentence)}:
                continue
            for m in _CAP_RUN.finditer(sentence):
                if not _near_relation(sentence, m.start(), m.end(), shape.relation):
                    continue
                words = fold(m.group()).split()
                while words and words[0] in _FUNCTION_WORDS:
                    words = words[1:]
                name = " ".join(words)
                if len(name) < _MIN_NAME or name in known or any(name in f or f in name for f in own):
                    continue
                if len(words) == 1 and not sentence[: m.start()].strip():
                    continue  # a capitalised sentence opener, not necessarily a name
                out.append(name)
    # a name of two words or more first: "British" is more often an adjective than a title
    return sorted(dict.fromkeys(out), key=lambda name: " " not in name)


def reads_multi_hop(shape: str | None) -> bool:
    """Whether a question whose evidence selection showed ``shape`` (:attr:`Selection.kind`,
    a search's ``usage["shape"]``) reads as multi-hop: it names an entity the index has a
    passage about (``"entity"``, ``"entity+bridge"``), or two or more (``"comparison"``, with
    or without a bridge). That passage is a first hop, and what an expansion round finds from
    its terms may be the next one even where the selection saw no bridge ("Where was the
    director of film X born?": the film's passage names the director, whose page the round
    finds). ``None`` (no selection was made) reads as multi-hop too, so nothing changes where
    the shape is unknown. The rest is one-hop: an ``"open"`` question names no entity of the
    index, so it has no first hop for a next-hop find to follow, and the "bridge" of an
    ``"open+bridge"`` one is a page naming another page's title (``Pip``, ``Installation`` in
    a docs folder), not a chain the question asks for (on musique100 the next-hop slots of its
    12 such questions change nothing). Reading ``"entity"`` as one-hop too cost 2wiki 0.20 of
    R@10 (98.58 -> 98.38, all 1,000 questions) and musique100 0.50 (81.58 -> 81.08), and
    changed nothing on pycode, cmrc2018 or the documentation folders of benchmarks/docsets.

    >>> [reads_multi_hop(s) for s in ("open", "open+bridge", "entity", "entity+bridge")]
    [False, False, True, True]
    >>> [reads_multi_hop(s) for s in ("comparison", "comparison+bridge", None)]
    [True, True, True]
    """
    return shape is None or shape.startswith(("comparison", "entity"))
