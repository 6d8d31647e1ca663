#!/usr/bin/env python3
"""Fit the "does the top result answer the query" confidence, leave-one-set-out.

Every response of a search carries a confidence (:mod:`hybridsag.fusion.confidence`): the
probability that its top result is a gold result, from a logistic model over what the search
already computed. This script fits that model.

1. **Indexes** (built once under ``--work``, reused): each shared set (2wiki, musique100,
   cmrc2018, pycode) and each dev set (benchmarks/devsets/manpages-en, manpages-ru), in passage
   mode as ``hybridsag eval`` builds them, with the default embedder (passage vectors cached
   under ``--work/cache``); and one tenant index holding musique100's corpus as tenant ``wiki``
   and pycode's as tenant ``code``.
2. **Runs** (captured once per group, cached under ``--work/captures``): a seeded sample of each
   set's questions over its own index (labelled 1 when the top result is gold), and "nothing
   relevant" groups, whose every label is 0: cmrc2018's Chinese questions over the English
   2wiki index, 2wiki's English ones over the Chinese cmrc2018 index, pycode's over musique100,
   musique100's over pycode, manpages-en's over musique100, manpages-ru's Russian ones over 2wiki,
   and tenant-scoped searches whose tenant holds nothing relevant (pycode's questions in tenant
   ``wiki``, musique100's in ``code``) beside ones whose tenant holds the answer. A capture keeps
   what a default search's fusion step reads (:meth:`hybridsag.search.HybridSearch.fusion_input`);
   the features are then made from it by the search's own fusion step and feature code
   (:func:`hybridsag.search.fuse_step`, :func:`hybridsag.search.confidence_step`), so the
   numbers fitted are the numbers a search computes. Each search is fused as a default search
   and once more as one of the other :data:`VARIANTS` in turn (a path off, the trust step
   off), so that the ``*_missing`` indicators are fitted; the rows are cached beside each
   capture.
3. **Leave-one-set-out**: the responses are grouped into folds by the set their questions come
   from (a fold holds that set's own searches *and* its questions used as nothing-relevant
   queries elsewhere, so a held-out set's questions are never seen in any role). For each fold
   the model is fitted on the other folds and predicts the held-out one; the report gives, per
   held-out fold, n, positives, ECE and Brier, and the pooled reliability table (10 bins). The
   "no good match" threshold is chosen on these held-out predictions, and its precision and
   recall on the nothing-relevant searches are reported.
4. **Final weights**: fitted on every fold but 2wiki's. 2wiki (the headline evaluation set) is
   only ever held out: nothing is fitted on its gold.

Run from the repository root. With nothing cached it took about 55 minutes on a loaded 2-core
machine, most of it embedding the corpora (2wiki's 6,119 passages: 19 minutes; ``--indexes``
splits the capture between two processes); with the captures and rows cached, about a minute::

    python scripts/fit_confidence.py --work /tmp/confidence-work --jobs 2 \\
        --out fusion/confidence_weights.json --report benchmarks/results/confidence_loso.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where the shared data sits beside a checkout (``--shared`` overrides).
SHARED = Path("/work/shared/data")
REPO = Path(__file__).resolve().parents[1]
#: Bump when what a capture holds changes.
CAPTURE_VERSION = 2
#: The seed of every question sample.
SEED = 27


@dataclass(frozen=True)
class Corpus:
    """A BEIR-style set (``docs`` false) or a documentation folder with questions
    (:mod:`hybridsag.evaluation.docsets`): its name and folder."""

    name: str
    folder: Path
    docs: bool = False


@dataclass(frozen=True)
class Group:
    """One group of searches: the questions of ``source`` run over the index ``index`` (in
    ``tenant`` when set), ``limit`` of them (a seeded sample); ``relevant``: the index holds their
    gold (else every label is 0). ``fold``: the held-out unit (the questions' set)."""

    name: str
    source: str
    index: str
    limit: int
    relevant: bool
    tenant: str | None = None

    @property
    def fold(self) -> str:
        return self.source


#: The documentation folders of benchmarks/docsets, each indexed as a user indexes a folder and
#: searched with its own questions (its unanswerable ones have nothing relevant) and, as
#: nothing-relevant searches, with the next folder's questions.
DOCSETS = ("flask", "pytest", "pydantic", "mkdocs-material", "django")


def corpora(shared: Path) -> dict[str, Corpus]:
    return {
        "2wiki": Corpus("2wiki", shared / "2wiki"),
        "musique100": Corpus("musique100", shared / "musique100"),
        "cmrc2018": Corpus("cmrc2018", shared / "cmrc2018"),
        "pycode": Corpus("pycode", shared / "pycode"),
        "manpages-en": Corpus("manpages-en", REPO / "benchmarks/devsets/manpages-en"),
        "manpages-ru": Corpus("manpages-ru", REPO / "benchmarks/devsets/manpages-ru"),
        **{f"docs-{d}": Corpus(f"docs-{d}", REPO / "benchmarks/docsets" / d, docs=True)
           for d in DOCSETS},
    }



def groups(n: int, cross: int, scoped: int) -> list[Group]:
    """The searches fitted on: ``n`` questions of each set over its own index, ``cross`` of each
    nothing-relevant pairing, ``scoped`` of each tenant-scoped group."""
    own = [Group(c, c, c, n, True) for c in
           ("2wiki", "musique100", "cmrc2018", "pycode", "manpages-en", "manpages-ru")]
    nothing = [
        Group("cmrc2018>2wiki", "cmrc2018", "2wiki", cross, False),
        Group("2wiki>cmrc2018", "2wiki", "cmrc2018", cross, False),
        Group("pycode>musique100", "pycode", "musique100", cross, False),
        Group("musique100>pycode", "musique100", "pycode", cross, False),
        Group("manpages-en>musique100", "manpages-en", "musique100", cross, False),
        Group("manpages-ru>2wiki", "manpages-ru", "2wiki", cross, False),
    ]
    docs = [Group(f"docs-{d}", f"docs-{d}", f"docs-{d}", n, True) for d in DOCSETS]
    docs += [Group(f"docs-{d}>docs-{e}", f"docs-{d}", f"docs-{e}", cross, False)
             for d, e in zip(DOCSETS, DOCSETS[1:] + DOCSETS[:1])]
    tenant = [
        Group("pycode>tenant:wiki", "pycode", "tenants", scoped, False, tenant="wiki"),
        Group("musique100>tenant:code", "musique100", "tenants", scoped, False, tenant="code"),
        Group("musique100>tenant:wiki", "musique100", "tenants", scoped, True, tenant="wiki"),
        Group("pycode>tenant:code", "pycode", "tenants", scoped, True, tenant="code"),
    ]
    return own + nothing + docs + tenant


def index_settings(data_dir: Path, *, docs: bool = False) -> Any:
    """A default search's settings over an eval index (passage mode, as ``hybridsag eval``),
    or over a documentation folder's index (``docs``: the defaults, as ``hybridsag index``)."""
    from hybridsag.evaluation.harness import PASSAGE_MAX_CHARS
    from hybridsag.settings import Settings

    if docs:
        return Settings(data_dir=data_dir)
    return Settings(
        data_dir=data_dir, chunking={"mode": "passage", "max_chars": PASSAGE_MAX_CHARS}
    )


def open_index(name: str, cs: dict[str, Corpus], work: Path) -> Any:
    """The HybridSearch over index ``name`` under ``work``, built first when it is not there
    (``built.json`` marks a finished build)."""
    from hybridsag.search import HybridSearch
    from hybridsag.vectors.embed_cache import CachedEmbedder
    from hybridsag.vectors.embedder import make_embedder

    data_dir = work / f"index-{name}"
    docs = name in cs and cs[name].docs
    settings = index_settings(data_dir, docs=docs)
    inner = make_embedder(settings)
    assert inner is not None
    emb = CachedEmbedder(inner, work / "cache")
    marker = data_dir / "built.json"
    if marker.is_file():
        return HybridSearch(settings, embedder=emb)
    if data_dir.exists():
        import shutil

        shutil.rmtree(data_dir)  # an unfinished build
    t0 = time.perf_counter()
    hs = HybridSearch(settings, embedder=emb)
    if name == "tenants":
        tmp = work / "tenants.jsonl"
        with tmp.open("w", encoding="utf-8") as out:
            for corpus, tenant in (("musique100", "wiki"), ("pycode", "code")):
                for line in (cs[corpus].folder / "corpus.jsonl").open(encoding="utf-8"):
                    if line.strip():
                        out.write(json.dumps({**json.loads(line), "tenant": tenant}) + "\n")
        report = hs.ingest_jsonl(tmp, mode="passage")
    elif docs:
        report = hs.ingest_folder(cs[name].folder / "docs")
    else:
        report = hs.ingest_jsonl(cs[name].folder / "corpus.jsonl", mode="passage")
    info = {"s": round(time.perf_counter() - t0, 1), "errors": len(report.errors),
            "chunks": hs.counts()["chunks"]}
    marker.write_text(json.dumps(info) + "\n", "utf-8")
    log(f"index {name}: {info}")
    return hs


def sample(questions: Sequence[Any], k: int, salt: str) -> list[Any]:
    """A seeded sample of ``k`` questions (all when there are fewer), in their set's order."""
    if k >= len(questions):
        return list(questions)
    rng = random.Random(f"{SEED}|{salt}")
    picked = sorted(rng.sample(range(len(questions)), k))
    return [questions[i] for i in picked]


def capture_group(g: Group, cs: dict[str, Corpus], work: Path, opened: dict[str, Any]) -> dict:
    """Capture the searches of group ``g`` unless cached: per question its id, gold resource
    keys and the fusion step's input, pickled under ``work/captures``; returns the group and
    the file."""
    from hybridsag.evaluation.docsets import load_docset
    from hybridsag.evaluation.harness import load_dataset, questions_of
    from hybridsag.paths.query import validate_query
    from hybridsag.records.filters import Filters
    from hybridsag.records.keys import resource_key

    source = cs[g.source]
    if source.docs:
        asked = [(q.qid, q.text, q.gold, q.type) for q in load_docset(source.folder)]
        digest = hashlib.sha256(repr(asked).encode()).hexdigest()
    else:
        ds = load_dataset(source.folder)
        asked = [(*q, "") for q in questions_of(ds)]
        digest = ds.digest
    key = hashlib.sha256(f"{CAPTURE_VERSION}|{g}|{digest}".encode()).hexdigest()[:12]
    path = work / "captures" / f"{g.name.replace(':', '_').replace('>', '_over_')}-{key}.pkl"
    if path.is_file():
        return {"group": g, "path": path}
    if g.index not in opened:
        opened[g.index] = open_index(g.index, cs, work)
    hs = opened[g.index]
    names = hs.resolve_paths(None)
    s = hs.settings
    flt = Filters(tenant=g.tenant) if g.tenant is not None else Filters()
    out = []
    t0 = time.perf_counter()
    for qid, text, gold, kind in sample(asked, g.limit, g.name):
        query = validate_query(text, max_chars=s.query.max_chars)
        ran = hs.run_paths(names, query, limit=max(s.fusion.depth, 10), filters=flt)
        fusion_in = hs.fusion_input(names, query, ran, flt, facts=s.fusion.trust)
        keys = frozenset(resource_key(r, g.tenant or "") for r in gold)
        out.append({"qid": qid, "gold": keys if g.relevant else frozenset(), "type": kind,
                    "fusion_in": fusion_in, "reasons": dict(ran.reasons)})
    captured = {"group": g, "paths": names, "questions": out,
                "s_per_query": round((time.perf_counter() - t0) / max(len(out), 1), 3)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        pickle.dump(captured, fh)
    log(f"captured {g.name}: {len(out)} questions, {captured['s_per_query']} s each")
    return {"group": g, "path": path}


@dataclass(frozen=True)
class Row:
    """One search as the fit reads it: its group, fold, features, label (its top result is
    gold), whether its index held anything relevant (not for a nothing-relevant group's
    searches nor a docs set's unanswerable questions) and the question's ``type`` (a docs
    set's, else empty)."""

    group: str
    fold: str
    relevant: bool
    features: dict[str, float]
    label: int
    variant: str = "default"
    type: str = ""


#: The path sets each captured search is also fused with, so that the model sees searches with
#: a path off (``--paths``) and weighs the ``*_missing`` indicators: name -> paths kept. A
#: variant is the capture's runs of those paths alone, fused as a search with them would fuse
#: them (the SAG2 pool was grown beside the dense path: without it the pool would differ a
#: little), with ``embedder_reads`` unknown when no embedding path ran, as a search measures it.
VARIANTS: dict[str, tuple[str, ...]] = {
    "default": ("sag2", "dense", "title", "bm25"),
    "no dense": ("sag2", "title", "bm25"),
    "no judge": ("dense", "title", "bm25"),
    "bm25 only": ("bm25",),
    "trust off": ("sag2", "dense", "title", "bm25"),
}
#: The variants fused with ``fusion.trust = false`` (no query facts measured, the configured
#: weights), as such a search fuses.
TRUST_OFF = frozenset({"trust off"})


def featurize(paths: Sequence[Path], *, jobs: int = 1) -> list[Row]:
    """The rows of the captured groups in ``paths`` (:func:`featurize_file`, ``jobs`` files at a
    time; each file's rows are cached beside it)."""
    if jobs > 1:
        from multiprocessing import get_context

        with get_context("fork").Pool(jobs) as pool:
            parts = pool.map(featurize_file, paths, chunksize=1)
    else:
        parts = [featurize_file(p) for p in paths]
    rows = [r for part in parts for r in part]
    log(f"{len(rows)} searches featurized")
    return rows


#: Bump when the features or the variants change (cached rows are then made again).
ROWS_VERSION = 3


def featurize_file(path: Path) -> list[Row]:
    """Each search of one captured group fused by a default search's fusion step (trust
    included) and its confidence features computed by :func:`hybridsag.search.confidence_step`,
    as a search computes them; every question with all its paths (``default``) and one other
    variant in turn (:data:`VARIANTS`: question ``i`` gets variant ``1 + i % 4``; fusing is the
    slow part). A search with no result has no confidence and is left out (counted). Cached as
    ``<capture>.rows-v<ROWS_VERSION>.json``."""
    from dataclasses import replace

    from hybridsag.evaluation.docsets import UNANSWERABLE
    from hybridsag.fusion.confidence import FEATURE_NAMES, ConfidenceModel
    from hybridsag.lexical.tokenizer import Tokenizer
    from hybridsag.paths.query_facts import load_trust_model
    from hybridsag.search import confidence_step, fuse_step
    from hybridsag.settings import Settings

    cached = path.with_name(f"{path.stem}.rows-v{ROWS_VERSION}.json")
    if cached.is_file():
        return [Row(**r) for r in json.loads(cached.read_text("utf-8"))]
    with path.open("rb") as fh:
        cap = pickle.load(fh)
    fusion = Settings().fusion
    plain = fusion.model_copy(update={"trust": False})
    trust_model = load_trust_model(fusion.trust_model)
    zero = ConfidenceModel(dict.fromkeys(FEATURE_NAMES, 0.0), 0.0)
    tokenizer = Tokenizer()
    names = list(VARIANTS)
    g: Group = cap["group"]
    rows, empty = [], 0
    for i, q in enumerate(cap["questions"]):
        for variant in ("default", names[1 + i % (len(names) - 1)]):
            fusion_in = _variant(q["fusion_in"], VARIANTS[variant])
            chosen = fusion
            if variant in TRUST_OFF:
                chosen, fusion_in = plain, replace(fusion_in, facts=None)
            fused, trust = fuse_step(fusion_in, chosen, trust_model)
            _p, feats = confidence_step(fusion_in, fused, trust, chosen, tokenizer, zero)
            if feats is None:
                empty += 1
                continue
            top = fused[0]
            views = fusion_in.views
            ids = {views[c].resource_id for c in (top.chunk_id, *top.duplicates) if c in views}
            label = int(bool(ids & q["gold"]))
            relevant = g.relevant and q.get("type") != UNANSWERABLE
            rows.append(Row(g.name, g.fold, relevant, feats, label, variant, q.get("type", "")))
    cached.write_text(json.dumps([r.__dict__ for r in rows]), "utf-8")
    log(f"featurized {g.name}: {len(rows)} searches, {empty} with no result left out")
    return rows


def _variant(fusion_in: Any, kept: Sequence[str]) -> Any:
    """``fusion_in`` with only the runs of ``kept`` (see :data:`VARIANTS`)."""
    from dataclasses import replace

    from hybridsag.paths import PATHS

    runs = {p: h for p, h in fusion_in.runs.items() if p in kept}
    facts = fusion_in.facts
    if facts is not None and not any(PATHS[p].kind == "embedding" for p in runs):
        facts = replace(facts, embedder_reads=None)
    return replace(fusion_in, runs=runs, facts=facts,
                   hidden=frozenset(p for p in fusion_in.hidden if p in runs))  # fmt: skip


def target(row: Row, head: str) -> int:
    """What ``head`` predicts of ``row``: ``"confidence"``, its top result is gold;
    ``"match"``, its index holds an answer (a real search of an answerable question)."""
    return row.label if head == "confidence" else int(row.relevant)


#: The two heads of the model (:class:`~hybridsag.fusion.confidence.ConfidenceModel`).
HEADS = ("confidence", "match")


def _matrix(rows: Sequence[Row], head: str = "confidence") -> tuple[Any, Any]:
    import numpy as np

    from hybridsag.fusion.confidence import FEATURE_NAMES

    x = np.array([[r.features[n] for n in FEATURE_NAMES] for r in rows], dtype=float)
    y = np.array([target(r, head) for r in rows], dtype=float)
    return x, y


def fit(rows: Sequence[Row], *, head: str = "confidence", l2: float = 1.0) -> tuple[Any, float]:
    """Logistic weights of ``head`` over ``FEATURE_NAMES`` and the bias (L2-penalised Newton,
    :func:`hybridsag.evaluation.tuning.fit_logistic`), each search weighing the same; a
    :data:`~hybridsag.fusion.confidence.MONOTONE_FEATURES` weight the fit puts below 0 is held
    at 0 and the rest refitted (the model may never lower its confidence for more of one)."""
    import numpy as np

    from hybridsag.evaluation.tuning import fit_logistic
    from hybridsag.fusion.confidence import FEATURE_NAMES, MONOTONE_FEATURES

    x, y = _matrix(rows, head)
    held: set[int] = set()
    while True:
        cols = [i for i in range(len(FEATURE_NAMES)) if i not in held]
        w = fit_logistic(x[:, cols], y, l2=l2)
        coef = np.zeros(len(FEATURE_NAMES))
        coef[cols] = w[:-1]
        negative = {FEATURE_NAMES.index(n) for n in MONOTONE_FEATURES
                    if coef[FEATURE_NAMES.index(n)] < 0} - held  # fmt: skip
        if not negative:
            return coef, float(w[-1])
        held |= negative


def predict(coef: Any, bias: float, rows: Sequence[Row]) -> Any:
    import numpy as np

    x, _y = _matrix(rows)
    return 1.0 / (1.0 + np.exp(-np.clip(x @ coef + bias, -50, 50)))


#: Reliability bins over the predicted probability.
BINS = 10


def reliability(p: Any, y: Any) -> tuple[list[tuple[str, int, float, float]], float, float]:
    """``(bins, ECE, Brier)``: per non-empty bin its range, count, mean predicted and observed
    share; ECE the count-weighted mean gap between the two."""
    import numpy as np

    idx = np.minimum((p * BINS).astype(int), BINS - 1)
    bins, ece = [], 0.0
    for b in range(BINS):
        m = idx == b
        if not m.any():
            continue
        mean_p, obs = float(p[m].mean()), float(y[m].mean())
        bins.append((f"{b / BINS:.1f}-{(b + 1) / BINS:.1f}", int(m.sum()), mean_p, obs))
        ece += m.sum() / len(p) * abs(mean_p - obs)
    return bins, float(ece), float(np.mean((p - y) ** 2))


def auc(p: Any, y: Any) -> float | None:
    """The area under the ROC curve (rank form, ties half), None with one class only."""
    pos, neg = p[y == 1], p[y == 0]
    if not len(pos) or not len(neg):
        return None
    wins = sum(float((q > neg).sum() + 0.5 * (q == neg).sum()) for q in pos)
    return wins / (len(pos) * len(neg))


#: The most of the real searches whose top result is gold that "no good match" may flag.
MAX_FALSE_FLAGS = 0.05


def flag_stats(p: Any, rows: Sequence[Row], t: float) -> dict[str, float]:
    """"no good match" (confidence below ``t``) as a detector of the searches whose index holds
    nothing relevant, against the real ones: precision, recall, and the share of the real
    searches whose top result is gold that it flags."""
    flagged = p < t
    nothing = [not r.relevant for r in rows]
    good = [r.relevant and r.label == 1 for r in rows]
    tp = sum(f and n for f, n in zip(flagged, nothing))
    return {
        "precision": tp / max(int(flagged.sum()), 1),
        "recall": tp / max(sum(nothing), 1),
        "gold_flagged": sum(f and g for f, g in zip(flagged, good)) / max(sum(good), 1),
        "real_flagged": sum(f and not n for f, n in zip(flagged, nothing))
        / max(len(rows) - sum(nothing), 1),
    }


def _loso(every: Sequence[Row], rows: Sequence[Row], head: str) -> tuple[Any, dict[str, list]]:
    """Held-out predictions of ``head`` for ``rows`` (the default searches), each fold's by the
    model fitted on the other folds' searches (every variant; never 2wiki's), and the same
    per variant as ``(p, target)`` pairs."""
    import numpy as np

    fitted = [r for r in every if r.fold != "2wiki"]
    held = np.zeros(len(rows))
    variant_p: dict[str, list] = {}
    for fold in sorted({r.fold for r in rows}):
        coef, bias = fit([r for r in fitted if r.fold != fold], head=head)
        ix = [i for i, r in enumerate(rows) if r.fold == fold]
        held[ix] = predict(coef, bias, [rows[i] for i in ix])
        for v in VARIANTS:
            vt = [r for r in every if r.fold == fold and r.variant == v]
            if vt:
                variant_p.setdefault(v, []).extend(
                    zip(predict(coef, bias, vt).tolist(), [target(r, head) for r in vt]))
    return held, variant_p


def docs_table(p: Any, rows: Sequence[Row], t: float) -> list[str]:
    """Per question type of the documentation folders (held-out predictions, flag at ``t``):
    the correct #1 answers flagged and the unanswerable questions flagged over their own
    folder, and the share of another folder's questions flagged."""
    own = [(x, r) for x, r in zip(p, rows) if r.group.startswith("docs-") and ">" not in r.group]
    cross = [(x, r) for x, r in zip(p, rows) if r.group.startswith("docs-") and ">" in r.group]
    lines = ["| question type | questions | correct #1 | correct #1 flagged | unanswerable "
             "flagged | another folder's questions flagged |", "|---|---|---|---|---|---|"]
    for kind in [*sorted({r.type for _x, r in own}), "all"]:
        mine = [(x, r) for x, r in own if kind in ("all", r.type)]
        top = [x for x, r in mine if r.label]
        unans = [x for x, r in mine if not r.relevant]
        other = [x for x, r in cross if kind in ("all", r.type)]
        un = f"{sum(x < t for x in unans)} of {len(unans)}" if unans else "-"
        lines.append(f"| {kind} | {len(mine)} | {len(top)} | {sum(x < t for x in top)} | {un} | "
                     f"{sum(x < t for x in other)} of {len(other)} |")  # fmt: skip
    return lines


def fit_and_report(rows: Sequence[Row]) -> tuple[str, dict[str, Any]]:
    """Leave-one-set-out predictions of both heads, their reliability, the "no good match"
    threshold on the match head, and the final model (fitted on every fold but 2wiki's) as the
    weights file holds it."""
    import numpy as np

    from hybridsag.fusion.confidence import FEATURE_NAMES

    every = rows
    fitted = [r for r in every if r.fold != "2wiki"]
    rows = [r for r in every if r.variant == "default"]
    folds = sorted({r.fold for r in rows})
    held_p, variant_p = _loso(every, rows, "confidence")
    match_p, _variant_m = _loso(every, rows, "match")
    lines = ["Confidence that the top result is gold, and the match (the index holds an answer) "
             "that decides \"no good match\", leave-one-set-out (scripts/fit_confidence.py).", "",
             f"Fitted on {len(fitted)} searches: every captured search fused as a default "
             "search does, and again as one of the other VARIANTS in turn ("
             + ", ".join(list(VARIANTS)[1:]) + "); the tables below are of the default "
             "searches (every path on, trust step on) unless they say otherwise.", "",
             "Per held-out set (its own searches and its questions run as nothing-relevant "
             "queries elsewhere), predicted by the model fitted on the other sets (2wiki: on "
             "all the others, and never fitted on); the match's AUC separates the searches "
             "whose index holds an answer from the others:", "",
             "| held-out set | n | positives | nothing-relevant searches | mean confidence | "
             "ECE | Brier | AUC | match AUC |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for fold in folds:
        ix = [i for i, r in enumerate(rows) if r.fold == fold]
        p, m = held_p[ix], match_p[ix]
        y = np.array([rows[i].label for i in ix], dtype=float)
        rel = np.array([float(rows[i].relevant) for i in ix])
        _b, ece, brier = reliability(p, y)
        a, am = auc(p, y), auc(m, rel)
        lines.append(
            f"| {fold} | {len(ix)} | {int(y.sum())} | {int((1 - rel).sum())} | "
            f"{p.mean():.3f} | {ece:.3f} | {brier:.3f} | {'-' if a is None else f'{a:.3f}'} | "
            f"{'-' if am is None else f'{am:.3f}'} |"
        )
    y_all = np.array([r.label for r in rows], dtype=float)
    bins, ece, brier = reliability(held_p, y_all)
    lines += ["", f"Pooled held-out confidence ({len(rows)} searches): ECE {ece:.3f}, "
              f"Brier {brier:.3f}, AUC {auc(held_p, y_all):.3f}.", "",
              "| predicted | searches | mean predicted | observed share gold |",
              "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {rng} | {n} | {mp:.3f} | {ob:.3f} |" for rng, n, mp, ob in bins]
    lines += ["", "Per variant (held-out confidence, every set):", "",
              "| variant | searches | positives | ECE | Brier | AUC |", "|---|---|---|---|---|---|"]
    for v, pairs in variant_p.items():
        pv = np.array([a for a, _ in pairs])
        yv = np.array([b for _, b in pairs], dtype=float)
        _b, e, br = reliability(pv, yv)
        av = auc(pv, yv)
        lines.append(f"| {v} | {len(pv)} | {int(yv.sum())} | {e:.3f} | {br:.3f} | "
                     f"{'-' if av is None else f'{av:.3f}'} |")  # fmt: skip
    lines += ["", "Per group, held-out predictions:", "",
              "| group | n | top is gold | mean confidence | mean match |", "|---|---|---|---|---|"]
    for g in dict.fromkeys(r.group for r in rows):
        ix = [i for i, r in enumerate(rows) if r.group == g]
        lines.append(f"| {g} | {len(ix)} | {sum(rows[i].label for i in ix)} | "
                     f"{held_p[ix].mean():.3f} | {match_p[ix].mean():.3f} |")  # fmt: skip
    # the threshold: on the held-out match of the fitted folds (2wiki never tunes it)
    tune = [i for i, r in enumerate(rows) if r.fold != "2wiki"]
    p_t = match_p[tune]
    r_t = [rows[i] for i in tune]
    grid = [round(0.01 * k, 2) for k in range(1, 100)]
    ok = [t for t in grid if flag_stats(p_t, r_t, t)["gold_flagged"] <= MAX_FALSE_FLAGS]
    chosen = max(ok) if ok else grid[0]
    lines += ["", "\"no good match\" (match below t) as a detector of the searches whose "
              "index holds nothing relevant (nothing-relevant groups and the documentation "
              "folders' unanswerable questions), against the real searches (held-out "
              "predictions, every set but 2wiki; gold flagged: the share of the real searches "
              "whose top result is gold that it flags):", "",
              "| t | precision | recall | real searches flagged | gold flagged |",
              "|---|---|---|---|---|"]  # fmt: skip
    for t in sorted({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, chosen}):
        f = flag_stats(p_t, r_t, t)
        mark = " (chosen)" if t == chosen else ""
        lines.append(f"| {t:.2f}{mark} | {f['precision']:.3f} | {f['recall']:.3f} | "
                     f"{f['real_flagged']:.3f} | {f['gold_flagged']:.3f} |")  # fmt: skip
    wiki = [i for i, r in enumerate(rows) if r.fold == "2wiki"]
    if wiki:
        f = flag_stats(match_p[wiki], [rows[i] for i in wiki], chosen)
        lines += ["", f"2wiki (never fitted on) at t = {chosen:.2f}: precision "
                  f"{f['precision']:.3f}, recall {f['recall']:.3f}, real searches flagged "
                  f"{f['real_flagged']:.3f}, gold flagged {f['gold_flagged']:.3f}."]  # fmt: skip
    if any(r.group.startswith("docs-") for r in rows):
        lines += ["", f"The documentation folders at t = {chosen:.2f}, each folder held out "
                  "(its own questions and its questions over the next folder):", ""]
        lines += docs_table(match_p, rows, chosen)
    lines.append("")
    lines.append(f"Chosen threshold (search.no_match_below): {chosen:.2f}, the largest that "
                 f"flags at most {MAX_FALSE_FLAGS:.0%} of the real searches whose top result is "
                 "gold.")  # fmt: skip
    coef, bias = fit(fitted)
    mcoef, mbias = fit(fitted, head="match")
    model = {
        "source": "scripts/fit_confidence.py, fitted on "
        + ", ".join(sorted({r.fold for r in fitted})) + " (never on 2wiki)",
        "coefficients": {n: round(float(c), 4) for n, c in zip(FEATURE_NAMES, coef)},
        "bias": round(bias, 4),
        "match": {"coefficients": {n: round(float(c), 4) for n, c in zip(FEATURE_NAMES, mcoef)},
                  "bias": round(mbias, 4)},
        "no_match_below": chosen,
        "searches": len(fitted),
        "groups": {g: sum(r.group == g for r in fitted) for g in dict.fromkeys(
            r.group for r in fitted)},
    }
    lines += ["", "Final weights (every set but 2wiki): confidence "
              + json.dumps(model["coefficients"]) + f", bias {model['bias']}; match "
              + json.dumps(model["match"]["coefficients"]) + f", bias {model['match']['bias']}",
              ""]  # fmt: skip
    return "\n".join(lines) + "\n", model


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="indexes, caches and captures")
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--n", type=int, default=150, help="questions of each set over its own index")
    ap.add_argument("--cross", type=int, default=80, help="questions of each nothing-relevant pair")
    ap.add_argument("--scoped", type=int, default=60, help="questions of each tenant group")
    ap.add_argument("--only-capture", action="store_true")
    ap.add_argument("--indexes", help="capture only the groups over these indexes (comma list), "
                    "e.g. to split the capture between two processes")
    ap.add_argument("--jobs", type=int, default=1, help="capture files featurized at a time")
    ap.add_argument("--out", type=Path, help="write the weights fitted on all folds but 2wiki's")
    ap.add_argument("--report", type=Path, help="write the LOSO report (Markdown) here")
    args = ap.parse_args(argv)
    cs = corpora(args.shared)
    opened: dict[str, Any] = {}
    captures = []
    try:
        # grouped by index, so that each index is open once (and closed once its groups ran)
        wanted = set(args.indexes.split(",")) if args.indexes else None
        for g in sorted(groups(args.n, args.cross, args.scoped), key=lambda g: g.index):
            if wanted is not None and g.index not in wanted:
                continue
            for name in [n for n in opened if n != g.index]:
                opened.pop(name).close()
            captures.append(capture_group(g, cs, args.work, opened))
    finally:
        for hs in opened.values():
            hs.close()
    if args.only_capture:
        return 0
    rows = featurize([c["path"] for c in captures], jobs=args.jobs)
    report, model = fit_and_report(rows)
    sys.stdout.write(report)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(report, "utf-8")
    if args.out:
        args.out.write_text(json.dumps(model, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
