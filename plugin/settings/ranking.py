"""The settings of ranking: the title path, fusion, the judges, the SAG2 loop and the search's
defaults."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from hybridsag.fusion.fuse import STEPS
from hybridsag.settings.base import RemoteSection, Section, comma_list

__all__ = [
    "ChatJudgeSettings",
    "FusionSettings",
    "JevSettings",
    "JudgeSettings",
    "RerankerSettings",
    "Sag2Settings",
    "SearchSettings",
    "TitleSettings",
]


class TitleSettings(Section):
    depth: int = Field(20, ge=1, le=1000)


class FusionSettings(Section):
    """Fusion: convex fusion of per-query normalised scores with the trust step (the default),
    or weighted RRF (Cormack, Clarke and Buettcher 2009), then the bounded rules.

    With SAG2 in the fusion, ``judge_order`` (on by default) keeps what its judge scored in the
    judge's order: the judge has already weighed the lexical, dense and title evidence the
    other paths would vote with again (docs/benchmarks.md shows what re-voting
    costs). The weights and k then place
    the hits no judge saw, and decide everything in fusions without SAG2. They come from
    ``hybridsag eval --tune-weights`` on musique100 (never on 2wiki, the headline set), with
    the title path at a small floor instead of the 0 the grid preferred, so an exact title still
    enters the fused list. Tune the weights and ``judge_order`` (and the method's own parameter:
    k for rrf, the normalisation for convex) on your own labelled set with ``--tune-weights``.
    """

    #: the RRF constant: read by "rrf", and under "convex" by a tenant-scoped search (fused by
    #: rank), so a convex configuration may set it; a grid or an eval arm that sweeps it under
    #: convex is refused (hybridsag.evaluation.offline_runs.check_method)
    k: float = Field(10.0, ge=1.0, le=1000.0)
    depth: int = Field(100, ge=1, le=10_000)
    weights: dict[str, float] = Field(
        default_factory=lambda: {"bm25": 1.0, "sag2": 1.0, "dense": 1.0, "title": 0.25}
    )
    pin_exact_titles: int = Field(3, ge=0, le=100)
    strict_identifiers: bool = False
    #: SAG2 hits whose judge probability reaches this come first after exact titles (the
    #: judge's "yes"); None turns the rule off.
    judge_accept: float | None = Field(0.5, ge=0.0, le=1.0)
    #: the hits the SAG2 judge scored keep the judge's order (the other paths add what it never
    #: saw); false lets the other paths' fused votes re-rank them below judge_accept.
    judge_order: bool = True
    #: the fusion function: "rrf" (weighted Reciprocal Rank Fusion) or "convex" (a weighted sum
    #: of per-query normalised scores, Bruch, Gai and Ingber, TOIS 2023)
    method: Literal["rrf", "convex"] = "convex"
    #: how "convex" normalises each path's scores per query
    normalisation: Literal["minmax", "zscore"] = "minmax"
    #: the per-query trust step (hybridsag.fusion.trust): it weighs the embedding path against
    #: the judged one from label-free signals and decides whether the judge's order holds;
    #: false keeps the weights and the judge rules as configured for every query
    trust: bool = True
    #: the trust model: None for the one that ships (hybridsag.fusion.DEFAULT_TRUST_MODEL), or a
    #: JSON file {"coefficients": {...}, "bias": b, ...} as benchmarks/fusion_loso.py writes
    trust_model: Path | None = None
    #: a hit the SAG2 judge scored below this is one it rejected: judge_order never moves it up
    #: (it may move it down) in a question its evidence selection read as one-hop or did not
    #: read; in one read as multi-hop a bridge the selection took keeps its place however the
    #: judge scored it (hybridsag.search.judge_floor); 0 lets every judged hit take the judge's
    #: order both ways
    judge_order_floor: float = Field(0.01, ge=0.0, le=1.0)
    #: the next-hop slots (a SAG2 expansion round's find keeps the rank that round gave it):
    #: "multi-hop" only for a question the judged path's evidence selection read as multi-hop
    #: (it names an entity the index has a passage about, or two compared: its usage "shape";
    #: hybridsag.paths.evidence.reads_multi_hop); "always" for every question
    next_hop_slots: Literal["multi-hop", "always"] = "multi-hop"
    #: at most this many results of one resource (file) stand before the other resources'
    #: results; its further ones follow them and its best result says how many (an exact title,
    #: or a definition or whole mention of the query's identifier, is never held back); 0: no cap
    max_per_resource: int = Field(2, ge=0, le=1000)
    #: fusion steps to switch off, by name (hybridsag.fusion.STEPS: drop_heading_only,
    #: drop_stub, exact_title, identifier_tiers, judge_accepted, next_hop_slot, judge_order,
    #: version_heading, query_language, exact_phrase, duplicates, merge_adjacent,
    #: resource_cap); docs/benchmarks.md gives each one's effect per set. In the environment a
    #: comma list or a JSON list
    rules_off: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("rules_off", mode="before")
    @classmethod
    def _split_rules(cls, value: object) -> object:
        return comma_list(value)

    @field_validator("rules_off")
    @classmethod
    def _check_rules(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in STEPS]
        if unknown:
            raise ValueError(f"unknown fusion steps {unknown}; valid: {', '.join(STEPS)}")
        return tuple(dict.fromkeys(value))

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        # path names are checked against the path registry when the parts are built
        for name, weight in value.items():
            if not math.isfinite(weight) or not 0.0 <= weight <= 100.0:
                raise ValueError(f"fusion.weights[{name!r}]={weight!r} must be a number in 0..100")
        return value

    def options(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        k: float | None = None,
        judge_order: bool | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments of :func:`hybridsag.fusion.fuse` for these settings; the arguments
        override the configured values (a search's ``weights=``, a tuning grid point). The
        per-query ``trust`` and ``next_hop`` are not among them: the search decides them.

        Args:
            weights: Path name -> weight; None: ``weights``.
            k: RRF's k; None: ``k``.
            judge_order: Keep the judge's order; None: ``judge_order``.
        """
        return {
            "judge_floor": self.judge_order_floor,
            "max_per_resource": self.max_per_resource,
            "off": self.rules_off,
            "method": self.method,
            "normalisation": self.normalisation,
            "k": self.k if k is None else k,
            "depth": self.depth,
            "weights": dict(self.weights if weights is None else weights),
            "pin_exact_titles": self.pin_exact_titles,
            "strict_identifiers": self.strict_identifiers,
            "judge_accept": self.judge_accept,
            "judge_order": self.judge_order if judge_order is None else judge_order,
        }


class JevSettings(Section):
    """The TypeSafe System One (Jev) judge API."""

    base_url: str = "https://api.typesafe.ai"
    route: Literal["systemone", "openrouter"] = "systemone"
    model: str = "jev-1.13.0"
    api_key: SecretStr | None = None
    token_budget: int = Field(32_000, ge=1_000, le=64_000)
    max_in_flight: int = Field(20, ge=1, le=20)
    timeout_s: float = Field(60.0, gt=0, le=600)
    max_retries: int = Field(4, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0, le=60)
    usd_per_million_input: float = Field(0.042, ge=0)
    connect_timeout_s: float = Field(10.0, gt=0, le=600)
    # A retry-after longer than this ends the retries at once (a search must not hang for an hour).
    max_retry_wait_s: float = Field(60.0, ge=0, le=3600)
    # Judgements kept in the in-memory LRU cache; 0 switches the cache off.
    cache_size: int = Field(4096, ge=0, le=1_000_000)


class RerankerSettings(RemoteSection):
    """The ``reranker`` judge (:mod:`hybridsag.judges.reranker`): a reranking endpoint scores
    (question, passage) pairs, ``batch_size`` passages (and at most ``token_budget`` estimated
    tokens) a request. ``api``: ``tei`` (Text Embeddings Inference ``POST /rerank``, raw scores),
    ``cohere`` (Cohere/Jina-style ``POST /v1/rerank``; vLLM and Infinity serve it too) or
    ``vllm`` (vLLM's ``POST /score``). ``model`` is sent to ``cohere`` and ``vllm`` (for ``tei``,
    which serves one model, it names the scores in caches and usage).

    ``calibration`` turns a score into a yes-probability: ``sigmoid`` gives
    ``1 / (1 + exp(-(score - offset) / temperature))`` (for logits: TEI's raw scores);
    ``identity`` takes a score already in 0..1 as it is (Cohere's and Jina's relevance scores,
    vLLM's scores of a one-label cross-encoder) and refuses one outside; ``auto`` is ``sigmoid``
    for ``tei`` and ``identity`` for the others. ``temperature`` and ``offset`` are refused with
    ``identity``.
    """

    timeout_s: float = Field(60.0, gt=0, le=600)
    api: Literal["tei", "cohere", "vllm"] = "tei"
    model: str | None = None
    calibration: Literal["auto", "sigmoid", "identity"] = "auto"
    temperature: float = Field(1.0, gt=0, le=1000)
    offset: float = Field(0.0, ge=-1000, le=1000)
    batch_size: int = Field(32, ge=1, le=1000)
    token_budget: int = Field(32_000, ge=500, le=1_000_000)
    cache_size: int = Field(4096, ge=0, le=1_000_000)

    @property
    def resolved_calibration(self) -> Literal["sigmoid", "identity"]:
        """``calibration`` with ``auto`` made concrete for ``api``."""
        if self.calibration != "auto":
            return self.calibration
        return "sigmoid" if self.api == "tei" else "identity"

    @model_validator(mode="after")
    def _check_calibration(self) -> RerankerSettings:
        inert = sorted({"temperature", "offset"} & self.model_fields_set)
        if inert and self.resolved_calibration == "identity":
            raise ValueError(
                f"judge.reranker.{', judge.reranker.'.join(inert)} mean nothing to calibration "
                f"'identity' (judge.reranker.api={self.api!r}); set calibration = 'sigmoid'"
            )
        return self


class ChatJudgeSettings(RemoteSection):
    """The ``chat`` judge (:mod:`hybridsag.judges.chat`): the Jev question asked of any model on
    an OpenAI-compatible ``POST /v1/chat/completions`` with ``logprobs`` on; the probability of
    the answer "yes" against "no" is read from the first token's ``top_logprobs`` most likely
    tokens. One request a candidate, ``max_in_flight`` at once; a request over
    ``token_budget`` estimated tokens is refused before it is sent. ``model`` is required."""

    timeout_s: float = Field(60.0, gt=0, le=600)
    max_in_flight: int = Field(8, ge=1, le=64)
    model: str | None = None
    top_logprobs: int = Field(5, ge=1, le=20)
    token_budget: int = Field(8_000, ge=500, le=1_000_000)
    cache_size: int = Field(4096, ge=0, le=1_000_000)


class JudgeSettings(Section):
    #: a name from the judge registry (features, jev, reranker, chat, cross-encoder, none, or
    #: one a team registered; checked when the parts are built)
    name: str = "features"
    on_failure: Literal["degrade", "raise"] = "degrade"
    cross_encoder_path: Path | None = None
    #: the features judge's weights: "default" is the leave-one-set-out-checked fit of
    #: scripts/fit_judge.py on several dev sets that ships in the package; "musique" the earlier
    #: fit on musique100 alone; "hand-set" (or None) the weights written down before any
    #: measurement; anything else a JSON file from scripts/fit_judge.py
    weights_file: Path | None = Path("default")
    jev: JevSettings = JevSettings()
    reranker: RerankerSettings = RerankerSettings()
    chat: ChatJudgeSettings = ChatJudgeSettings()


class Sag2Settings(Section):
    """SAG2 lexical-judge loop; defaults from the SAG-Wiki / SAG2 descriptions."""

    recall: int = Field(50, ge=1, le=1000)
    deep_recall: int = Field(100, ge=1, le=1000)
    deep: bool = False
    rounds: int = Field(1, ge=0, le=2)
    seeds: int = Field(10, ge=1, le=100)
    expansion_terms: int = Field(20, ge=1, le=100)
    diversity_top: int = Field(10, ge=0, le=100)
    dense_candidates: int = Field(20, ge=0, le=200)
    #: evidence-set selection (``hybridsag.paths.evidence``): the first ``set_k`` results are
    #: taken greedily so that every entity the question names and every bridge the evidence
    #: opens is covered before a second passage on the same need; 0 keeps the judge's order
    set_k: int = Field(10, ge=0, le=100)
    #: what an open entity need, an open bridge, and a bridge off the question's relation words
    #: add to a passage's probability (see ``select_evidence``)
    entity_weight: float = Field(3.0, ge=0.0, le=100.0)
    bridge_weight: float = Field(40.0, ge=0.0, le=100.0)
    relation_floor: float = Field(0.1, ge=0.0, le=1.0)
    #: targeted second hop: at most this many names that the selected evidence uses on the
    #: question's relation, with no candidate about them, are looked up (title, then text) and
    #: judged; 0 turns it off
    gap_lookups: int = Field(4, ge=0, le=20)


class SearchSettings(Section):
    top_k: int = Field(10, ge=1, le=1000)
    #: path names from the path registry (checked when the parts are built); in the environment
    #: a comma list (``HYBRIDSAG_SEARCH__PATHS=bm25,title``) or a JSON list
    paths: Annotated[tuple[str, ...], NoDecode] = ("sag2", "dense", "title", "bm25")
    #: a result whose source file changed on disk since it was indexed (a ``git pull``, a
    #: ``touch``, an edit, a delete) is shown marked stale (``stale: true`` and
    #: ``stale_reason``: "changed on disk", "deleted on disk", ...) when true, the default:
    #: an answer marked stale is worth more than one hidden after a ``touch``. False holds such
    #: results back; the response then says how many (``stale_hidden``) and which
    #: (``stale_hidden_ids``), and the CLI prints "N results hidden: sources changed since
    #: indexing". Re-indexing the folder (or ``hybridsag reconcile``) makes them fresh again
    include_stale: bool = True
    #: most characters of a chunk's text a result carries (``text_truncated`` says when cut)
    max_text_chars: int = Field(4096, ge=64, le=1_000_000)
    #: a search's budget of calls to remote models (HTTP requests, retries included, of the
    #: embedder and the judge together) and of milliseconds after which none is made or waited
    #: for; a spent budget degrades the search (the judge keeps what it had, the dense path is
    #: left out) and the response says why. None: no limit
    remote_budget_calls: int | None = Field(None, ge=1, le=100_000)
    remote_budget_ms: float | None = Field(None, gt=0, le=600_000)
    #: every response carries ``confidence``, the calibrated probability that its top result
    #: answers the query (:mod:`hybridsag.fusion.confidence`); when the confidence model's
    #: match, the probability that the index holds an answer at all, is below this threshold
    #: the response says ``no_good_match`` and the CLI and agent output say "no good match"
    #: before the results (listed after that line, marked weak). The default is the
    #: leave-one-set-out choice of scripts/fit_confidence.py (benchmarks/results/confidence_loso.md):
    #: it flags 89.6% of the held-out searches whose index holds nothing relevant (precision
    #: 86%), 4.9% of the real searches whose top result is gold, and on the documentation
    #: folders 1 of 147 correct #1 answers and 22 of 30 unanswerable questions.
    #: 0 never says it. A search's own ``min_confidence`` withholds the results instead
    no_match_below: float = Field(0.52, ge=0.0, le=1.0)

    @field_validator("paths", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        return comma_list(value)
