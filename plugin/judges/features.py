"""The offline ``features`` judge: no question or passage leaves the machine.

No judge or cross-encoder model ships its weights in a PyPI package, and a
bi-encoder alone cannot see that a second-hop passage matters. What does see it is structure:
the **bridge** between a candidate and the evidence already accepted. The judge scores each
candidate with a linear model over:

- lexical ranks: reciprocal rank in the first BM25 list (``bm25_rank``) and in the expansion
  lists (``expansion_rank``), BM25 score normalised by the list's best, the round that found it;
- embedding cosines (when the store holds passage vectors and an embedder is configured):
  cos(question, candidate) and cos(question + accepted evidence, candidate);
- title and entity features (only when the corpus has real titles / the question names
  entities): the share of the candidate title's tokens found in the question, the share of the
  question's capitalised-word entities found in the candidate's title and in its text;
- **bridge** features against the accepted evidence: the candidate's title is named (whole words,
  case-insensitive) in an evidence passage's text, and an evidence passage's title is named in
  the candidate's text.

Two passes: pass 1 scores without bridge features and takes the top ``evidence_k`` (3) as
accepted evidence (beside any evidence the caller passes); pass 2 adds the bridge features. A
logistic squash ``1 / (1 + exp(-(w . x + b)))`` turns the score into the probability.

The settings' default weights (``judge.weights_file = "default"``, shipped as
``judge_weights.json``) are the logistic-regression fit of ``scripts/fit_judge.py`` on several
heterogeneous dev sets (multi-hop, code, Chinese, English and Russian definition lookup; never
2wiki), checked leave-one-set-out; the candidate's dense rank and cosines enter normalised per
query (ranks and z-scores), so their scale is the same for any corpus and model. A second set,
``lexical_weights``, fitted with the dense columns at zero, judges a question the embedding model
cannot read; the two are blended by the share it reads. ``"musique"`` is the earlier fit on
musique100 alone (raw cosines), ``"hand-set"`` the weights written down before any measurement
(``DEFAULT_WEIGHTS``). A team fits its own with ``scripts/fit_judge.py`` on labelled sets and
points ``judge.weights_file`` at the JSON file; a file of an older feature list still loads
(the features it lacks weigh 0), one naming an unknown feature is refused with the valid names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from hybridsag.vectors.embedder import vocabulary_share
from hybridsag.errors import ConfigError, HybridSagError
from hybridsag.judges.base import Candidate, JudgeResult, JudgeUsage
from hybridsag.fusion.text.sentences import has_name

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = [
    "DEFAULT_WEIGHTS",
    "DENSE_FEATURES",
    "FEATURE_NAMES",
    "FeatureJudge",
    "FeatureWeights",
    "PACKAGED_WEIGHTS",
    "build",
    "extract_entities",
    "feature_rows",
    "load_weights",
]

FEATURE_NAMES: tuple[str, ...] = (
    "rr_bm25",
    "rr_expansion",
    "bm25_norm",
    "later_round",
    "cos_question",
    "cos_evidence",
    "title_in_question",
    "entity_in_title",
    "entity_in_text",
    "bridge_title_in_evidence",
    "bridge_evidence_title_in_text",
    "rr_dense",
    "cos_question_z",
    "cos_evidence_z",
    "rr_cos_question",
)

#: The features that read the embedder (cosines and the dense path's rank): the judge scales them
#: by the share of the question the embedder can read (``vocabulary_share``), so a question in a
#: language the model does not know is judged on the lexical and bridge evidence alone.
DENSE_FEATURES: frozenset[str] = frozenset(
    {"cos_question", "cos_evidence", "rr_dense", "cos_question_z", "cos_evidence_z",
     "rr_cos_question"}
)

#: Hand-set weights, chosen by reasoning before any measurement: the strongest single signals are
#: a title that the question names and a bridge to accepted evidence; lexical rank and cosine
#: order the rest. The bias puts a candidate with no signal near p = 0.05.
DEFAULT_WEIGHTS: dict[str, float] = {
    "rr_bm25": 1.0,
    "rr_expansion": 0.5,
    "bm25_norm": 1.0,
    "later_round": -0.25,
    "cos_question": 2.0,
    "cos_evidence": 1.0,
    "title_in_question": 2.0,
    "entity_in_title": 1.5,
    "entity_in_text": 0.5,
    "bridge_title_in_evidence": 2.0,
    "bridge_evidence_title_in_text": 1.0,
    "bias": -3.0,
}

_CAP_RUN = re.compile(r"\b[A-Z][\w'’\-]*(?:\s+(?:of|de|la|le|von|van|the|du|da|di|del|y|and|&)?\s*[A-Z][\w'’\-]*)*")
_WORDS = re.compile(r"\w+")
_SENTENCE_START_STOP = frozenset(
    "what which who whom whose when where why how is are was were did do does the a an in on at "
    "of for to from by with and or who's".split()
)


#: The weight files that ship in the package, by the name ``judge.weights_file`` gives them:
#: (file, source as reported).
PACKAGED_WEIGHTS: dict[str, tuple[str, str]] = {
    "default": ("judge_weights.json", "packaged multi-set fit"),
    "musique": ("judge_weights_musique.json", "packaged musique fit"),
}


@dataclass(frozen=True, slots=True)
class FeatureWeights:
    """The judge's weights by feature name (``"bias"`` too) and where they came from.

    ``lexical``: optional weights for a question the embedding model cannot read, fitted with
    every :data:`DENSE_FEATURES` column at zero; the judge blends the two by the share of the
    question the model reads (:meth:`blended`). Without them the one set serves both."""

    weights: Mapping[str, float]
    source: str
    lexical: Mapping[str, float] | None = None

    def vector(self) -> np.ndarray:
        return np.array([self.weights.get(n, 0.0) for n in FEATURE_NAMES], dtype=np.float64)

    @property
    def bias(self) -> float:
        return float(self.weights.get("bias", 0.0))

    def blended(self, reads: float) -> tuple[np.ndarray, float]:
        """``(vector, bias)`` for a question the embedder reads ``reads`` (0..1) of:
        ``reads * weights + (1 - reads) * lexical`` (just ``weights`` without ``lexical``)."""
        if self.lexical is None or reads >= 1.0:
            return self.vector(), self.bias
        lex = np.array([self.lexical.get(n, 0.0) for n in FEATURE_NAMES], dtype=np.float64)
        lex_bias = float(self.lexical.get("bias", 0.0))
        return (
            reads * self.vector() + (1.0 - reads) * lex,
            reads * self.bias + (1.0 - reads) * lex_bias,
        )


def load_weights(path: Path | str | None) -> FeatureWeights:
    """Weights from a JSON file ``{"weights": {name: value, ..., "bias": b},
    "lexical_weights": {...}?}``; ``None`` or ``"hand-set"`` gives the hand-set defaults;
    ``"default"`` (the settings' default) and ``"musique"`` the fitted files shipped with the
    package (:data:`PACKAGED_WEIGHTS`).

    Raises:
        ConfigError: a missing file, an unknown feature name (the valid ones are listed), or
            lexical weights on an embedding feature.
    """
    if path is None or str(path) == "hand-set":
        return FeatureWeights(DEFAULT_WEIGHTS, "hand-set")
    if str(path) in PACKAGED_WEIGHTS:
        name, source = PACKAGED_WEIGHTS[str(path)]
        text = resources.files("hybridsag.judges").joinpath(name).read_text()
    else:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"judge.weights_file {p} does not exist")
        text, source = p.read_text("utf-8"), str(p)
    data = json.loads(text)
    weights = data.get("weights", data)
    lexical = data.get("lexical_weights") if "weights" in data else None
    for name, table in (("weights", weights), ("lexical_weights", lexical or {})):
        unknown = set(table) - set(FEATURE_NAMES) - {"bias"}
        if unknown:
            raise ConfigError(
                f"unknown judge features {sorted(unknown)} in {name} of {source}; "
                f"valid: {FEATURE_NAMES}"
            )
    dense = sorted(n for n, v in (lexical or {}).items() if n in DENSE_FEATURES and v)
    if dense:
        raise ConfigError(f"lexical_weights of {source} weigh embedding features {dense}")
    return FeatureWeights(
        {k: float(v) for k, v in weights.items()},
        source,
        None if lexical is None else {k: float(v) for k, v in lexical.items()},
    )


def extract_entities(question: str) -> list[str]:
    """Capitalised-word runs of a question (``Lothair II``, ``Project Mercury``), lowercased;
    a sentence-initial question word alone is not an entity."""
    out = []
    for m in _CAP_RUN.finditer(question):
        words = m.group().split()
        while words and words[0].lower() in _SENTENCE_START_STOP:
            words = words[1:]
        while words and words[-1].lower() in _SENTENCE_START_STOP:
            words = words[:-1]
        if words:
            ent = " ".join(words).lower()
            ent = re.sub(r"['’]s$", "", ent)
            if len(ent) >= 2:
                out.append(ent)
    return list(dict.fromkeys(out))


def _name(name: str) -> str | None:
    """A name as the bridge features look for it (lowercased), or None when shorter than 3."""
    name = name.strip().lower()
    return name if len(name) >= 3 else None


def _strip_disambiguation(title: str) -> str:
    """``Theodred II (Bishop of Elmham)`` is named in text as ``Theodred II``."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


@lru_cache(maxsize=65536)
def _title_names(title: str) -> tuple[str, ...]:
    """The names that find ``title`` named in a lowercased text: the title, and without its
    disambiguation; a title is asked for once per evidence passage in every pass."""
    names = dict.fromkeys((title, _strip_disambiguation(title)))
    return tuple(n for n in (_name(m) for m in names) if n is not None)


def title_words(tokens: Callable[[str], list[str]], title: str) -> tuple[str, ...]:
    """The alphanumeric tokens of ``title`` without its disambiguation (what the title-overlap
    feature counts)."""
    return tuple(t for t in tokens(_strip_disambiguation(title)) if t.isalnum())


def feature_rows(
    question: str,
    candidates: Sequence[Candidate],
    *,
    evidence: Sequence[Candidate],
    cos_question: Mapping[str, float] | None,
    cos_evidence: Mapping[str, float] | None,
    use_titles: bool,
    tokens: Callable[[str], list[str]],
    question_tokens: frozenset[str],
    dense_scale: float = 1.0,
    title_tokens: Callable[[str], Sequence[str]] | None = None,
) -> np.ndarray:
    """The feature matrix (candidates x FEATURE_NAMES). Bridge columns are zero when
    ``evidence`` is empty; title/entity columns are zero unless ``use_titles``.

    The per-query normalised columns compare a candidate with the rest of this pool, so their
    scale is the same whatever the corpus and the model: ``cos_question_z`` and
    ``cos_evidence_z`` are z-scores of the cosines over the candidates (0 when they are all
    equal), ``rr_cos_question`` the reciprocal of the candidate's cosine rank in the pool, and
    ``rr_dense`` the reciprocal of its rank on the dense path (``signals["dense_rank"]``; 0 when
    that path did not bring it). Every column in :data:`DENSE_FEATURES` is multiplied by
    ``dense_scale`` (0..1: the share of the question the embedder can read). ``title_tokens``
    gives a title's :func:`title_words` (a judge passes a cached one; default: computed)."""
    pool = _PoolFeatures.read(
        question,
        candidates,
        cos_question=cos_question,
        use_titles=use_titles,
        tokens=tokens,
        question_tokens=question_tokens,
        title_tokens=title_tokens,
    )
    return pool.rows(evidence=evidence, cos_evidence=cos_evidence, dense_scale=dense_scale)


@dataclass(frozen=True, slots=True)
class _PoolFeatures:
    """What :func:`feature_rows` reads of a pool that does not depend on the accepted evidence
    (the lexical, title, entity and question-cosine columns, and each candidate's lowered
    text), read once so that the judge's two passes share it; :meth:`rows` adds the evidence's
    columns and the per-query normalised ones."""

    candidates: Sequence[Candidate]
    base: np.ndarray
    texts_lower: list[str] | None
    use_titles: bool
    has_cos_question: bool

    @classmethod
    def read(
        cls,
        question: str,
        candidates: Sequence[Candidate],
        *,
        cos_question: Mapping[str, float] | None,
        use_titles: bool,
        tokens: Callable[[str], list[str]],
        question_tokens: frozenset[str],
        title_tokens: Callable[[str], Sequence[str]] | None = None,
    ) -> _PoolFeatures:
        words_of = title_tokens or (lambda title: title_words(tokens, title))
        entities = extract_entities(question) if use_titles else []
        ent_names = [n for n in (_name(e) for e in entities) if n is not None]
        best_bm25 = (
            max((c.signals.get("bm25_score", 0.0) for c in candidates), default=0.0) or 1.0
        )
        rows = np.zeros((len(candidates), len(FEATURE_NAMES)), dtype=np.float64)
        texts_lower = [c.text.lower() for c in candidates] if use_titles else None
        for i, c in enumerate(candidates):
            s = c.signals
            rank = s.get("bm25_rank", 0.0)
            exp_rank = s.get("expansion_rank", 0.0)
            row = rows[i]
            row[0] = 1.0 / rank if rank else 0.0
            row[1] = 1.0 / exp_rank if exp_rank else 0.0
            row[2] = max(0.0, s.get("bm25_score", 0.0)) / best_bm25
            row[3] = 1.0 if s.get("round", 0.0) > 0 else 0.0
            if cos_question is not None:
                row[4] = cos_question.get(c.chunk_id, 0.0)
            if use_titles and c.title:
                words = words_of(c.title)
                if words:
                    row[6] = sum(t in question_tokens for t in words) / len(words)
                if ent_names:
                    title_l = c.title.lower()
                    text_l = texts_lower[i]  # type: ignore[index]
                    row[7] = sum(has_name(n, title_l) for n in ent_names) / len(ent_names)
                    row[8] = sum(has_name(n, text_l) for n in ent_names) / len(ent_names)
            dense_rank = s.get("dense_rank", 0.0)
            row[_RR_DENSE] = 1.0 / dense_rank if dense_rank else 0.0
        return cls(candidates, rows, texts_lower, use_titles, cos_question is not None)

    def rows(
        self,
        *,
        evidence: Sequence[Candidate],
        cos_evidence: Mapping[str, float] | None,
        dense_scale: float = 1.0,
    ) -> np.ndarray:
        """The full matrix, as :func:`feature_rows` gives it, for ``evidence`` and
        ``cos_evidence``."""
        candidates = self.candidates
        rows = self.base.copy()
        if cos_evidence is not None:
            rows[:, _COS_E] = [cos_evidence.get(c.chunk_id, 0.0) for c in candidates]
        if self.use_titles and evidence:
            # an evidence passage's title names and lowered text; a candidate's own passage
            # never bridges to itself
            ev = [
                (e.chunk_id, _title_names(e.title) if e.title else (), e.text.lower())
                for e in evidence
            ]
            texts = self.texts_lower
            assert texts is not None
            for i, c in enumerate(candidates):
                if not c.title:
                    continue
                names = _title_names(c.title)
                text_l = texts[i]
                cid = c.chunk_id
                row = rows[i]
                row[9] = float(
                    any(ev_id != cid and _any_name(names, ev_text) for ev_id, _, ev_text in ev)
                )
                row[10] = float(
                    any(
                        ev_id != cid and bool(ev_names) and _any_name(ev_names, text_l)
                        for ev_id, ev_names, _ in ev
                    )
                )
        if self.has_cos_question and len(candidates):
            cq = rows[:, _COS_Q]
            rows[:, _COS_Q_Z] = _zscore(cq)
            order = np.argsort(-cq, kind="stable")
            rr = np.empty(len(cq))
            rr[order] = 1.0 / np.arange(1, len(cq) + 1)
            rows[:, _RR_COS_Q] = rr
        if cos_evidence is not None and len(candidates):
            rows[:, _COS_E_Z] = _zscore(rows[:, _COS_E])
        if dense_scale != 1.0:
            rows[:, _DENSE_COLUMNS] *= dense_scale
        return rows


def _any_name(names: Sequence[str], text_lower: str) -> bool:
    """Whether one of ``names`` stands whole in ``text_lower`` (:func:`has_name`)."""
    for n in names:
        if n in text_lower and has_name(n, text_lower):
            return True
    return False


_COS_Q = FEATURE_NAMES.index("cos_question")
_COS_E = FEATURE_NAMES.index("cos_evidence")
_RR_DENSE = FEATURE_NAMES.index("rr_dense")
_COS_Q_Z = FEATURE_NAMES.index("cos_question_z")
_COS_E_Z = FEATURE_NAMES.index("cos_evidence_z")
_RR_COS_Q = FEATURE_NAMES.index("rr_cos_question")
_DENSE_COLUMNS = [i for i, n in enumerate(FEATURE_NAMES) if n in DENSE_FEATURES]


def _zscore(values: np.ndarray) -> np.ndarray:
    """``(x - mean) / std`` over one query's pool; zeros when the values do not vary."""
    std = float(values.std())
    if not std > 1e-9:
        return np.zeros_like(values)
    return (values - float(values.mean())) / std


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -50, 50)))


class FeatureJudge:
    """The offline judge. ``vectors`` maps chunk ids to unit vectors (or returns {}),
    ``embed_query`` embeds the question; either may be None (lexical + bridge features only)."""

    name = "features"

    def __init__(
        self,
        *,
        tokens: Callable[[str], list[str]],
        weights: FeatureWeights | None = None,
        vectors: Callable[[Sequence[str]], Mapping[str, np.ndarray]] | None = None,
        embed_query: Callable[[str], np.ndarray] | None = None,
        use_titles: bool | None = None,
        evidence_k: int = 3,
        vocabulary_share: Callable[[str], float | None] | None = None,
    ) -> None:
        self.tokens = tokens
        self.weights = weights or load_weights(None)
        self.vectors = vectors
        self.embed_query = embed_query
        self.vocabulary_share = vocabulary_share
        self.use_titles = use_titles
        self.evidence_k = evidence_k
        # a title's words depend on the title and this judge's tokenizer only, and the same
        # titles come back in every pass and search: tokenized once
        self._title_words = lru_cache(maxsize=65536)(partial(title_words, tokens))

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        if not candidates:
            return JudgeResult({}, JudgeUsage())
        rows, detail = self._pass_two(question, candidates, evidence)
        w, bias = self.weights.blended(float(detail["dense_scale"]))
        probs = _sigmoid(rows @ w + bias)
        return JudgeResult(
            probabilities={c.chunk_id: float(p) for c, p in zip(candidates, probs)},
            usage=JudgeUsage(),
            detail=detail,
        )

    def features(
        self, question: str, candidates: Sequence[Candidate], *, evidence: Sequence[Candidate] = ()
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The pass-2 feature matrix (for fitting weights) and the judge's detail."""
        return self._pass_two(question, candidates, evidence)

    def _pass_two(
        self, question: str, candidates: Sequence[Candidate], evidence: Sequence[Candidate]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Pass 1 (no bridge) picks the accepted evidence; returns pass 2's feature rows."""
        use_titles = self.use_titles
        if use_titles is None:
            with_titles = sum(1 for c in candidates if c.title)
            use_titles = with_titles >= 0.5 * len(candidates)
        cos_q = cos_e = None
        qvec = None
        vecs: Mapping[str, np.ndarray] = {}
        degraded = None
        if self.vectors is not None and self.embed_query is not None:
            vecs = self.vectors([c.chunk_id for c in candidates])
            if vecs:
                try:
                    qvec = self.embed_query(question)
                except HybridSagError as exc:  # judged without cosines, and said so
                    degraded = f"judged without embeddings: {type(exc).__name__}: {exc}"
                    vecs = {}
                else:
                    cos_q = {cid: float(v @ qvec) for cid, v in vecs.items()}
        dense_scale = 1.0
        if self.vocabulary_share is not None:
            share = self.vocabulary_share(question)
            dense_scale = 1.0 if share is None else min(1.0, max(0.0, share))
        pool = _PoolFeatures.read(
            question,
            candidates,
            cos_question=cos_q,
            use_titles=use_titles,
            tokens=self.tokens,
            question_tokens=frozenset(self.tokens(question)),
            title_tokens=self._title_words,
        )
        rows = pool.rows(evidence=(), cos_evidence=cos_q, dense_scale=dense_scale)
        w, bias = self.weights.blended(dense_scale)
        first = rows @ w + bias
        order = np.argsort(-first, kind="stable")
        accepted = list(evidence) + [
            candidates[i] for i in order[: self.evidence_k] if candidates[i] not in evidence
        ]
        if qvec is not None:
            acc_vecs = [vecs[e.chunk_id] for e in accepted if e.chunk_id in vecs]
            qe = qvec + np.sum(acc_vecs, axis=0) if acc_vecs else qvec
            qe = qe / (np.linalg.norm(qe) or 1.0)
            cos_e = {cid: float(v @ qe) for cid, v in vecs.items()}
        rows = pool.rows(evidence=accepted, cos_evidence=cos_e, dense_scale=dense_scale)
        detail = {
            "evidence": [e.chunk_id for e in accepted],
            "use_titles": use_titles,
            "cosines": cos_q is not None,
            "dense_scale": dense_scale,
            "weights": self.weights.source,
        }
        if degraded:
            detail["degraded"] = degraded
        return rows, detail


def build(parts: Parts) -> FeatureJudge:
    """Registry factory: the index tokenizer, the configured weights and, when the dense path is
    on, the passage vectors kept in the store and the query embedder (built on first use)."""
    vectors = embed_query = share = None
    if parts.dense_enabled:
        store = parts.store

        def vectors(ids: Sequence[str]) -> dict[str, np.ndarray]:
            raw = store.chunk_vectors(ids)
            return {k: np.frombuffer(v, dtype=np.float32) for k, v in raw.items()}

        def embed_query(question: str) -> np.ndarray:
            emb = parts.embedder()
            return np.asarray(emb.encode([question], kind="query")[0], dtype=np.float32)

        def share(question: str) -> float | None:
            return vocabulary_share(parts.embedder(), question)

    return FeatureJudge(
        tokens=parts.tokenizer.tokenize,
        weights=load_weights(parts.settings.judge.weights_file),
        vectors=vectors,
        embed_query=embed_query,
        vocabulary_share=share,
    )
