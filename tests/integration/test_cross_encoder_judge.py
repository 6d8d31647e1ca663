"""The ``cross-encoder`` judge's plumbing, with tiny randomly initialised models built here.

No cross-encoder ships inside a PyPI package, so the tests build one: a 2-layer BERT (hidden 32,
2 heads) over a small WordPiece vocabulary, saved with its tokenizer into a temporary folder and
loaded through the judge exactly as a team's own model folder would be. The scores mean nothing;
what is tested is loading (offline, lazily), pairing, batching, the squash into 0..1, usage, and
the SAG2 path running end to end on the judge.

The models are built from a fixed seed (``transformers.set_seed``: Python, NumPy and torch), and
the tests assert only what any model guarantees: one probability per candidate in 0..1, the same
numbers on a repeated call, a stable order. A random model need not tell every candidate apart:
two pairs may score within float32 rounding of each other, and which way that rounding falls
depends on the CPU's kernels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from hybridsag.components import Components
from hybridsag.documents import make_document
from hybridsag.errors import ConfigError
from hybridsag.judges import make_judge
from hybridsag.judges.base import Candidate, Judge
from hybridsag.judges.cross_encoder import CrossEncoderJudge, pair_text
from hybridsag.search import HybridSearch
from hybridsag.settings import Settings
from hybridsag.records.filters import Filters

WORDS = (
    "who what when where did was is the a of and in to by for film director directed mother "
    "born river city capital danube budapest flows through hungary vienna cats sleep bread "
    "baked flour harbor moonlit elena varga painter writer"
).split()


def _write_model(folder: Path, num_labels: int, seed: int) -> Path:
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
        set_seed,
    )

    folder.mkdir(parents=True)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(WORDS)]
    vocab += list(letters) + ["##" + ch for ch in letters] + list(".,?!'()-")
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # from_pretrained reads vocab.txt in transformers 4 and 5 alike; the constructor's keyword
    # changed (vocab_file -> vocab) and transformers 5 ignores the old one, leaving a vocabulary
    # of the special tokens only, so every word became [UNK] and the model saw only lengths.
    tokenizer = BertTokenizerFast.from_pretrained(str(folder), model_max_length=128)
    assert tokenizer.tokenize("Danube flows through Budapest") == [
        "danube", "flows", "through", "budapest"
    ], "the test tokenizer lost its vocabulary"
    set_seed(seed)  # Python, NumPy and torch: the weights below are the same on every run
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
        # wider than BERT's 0.02, so the probabilities spread out over 0..1
        # instead of all lying within 1e-5 of 0.5, where the 1e-6 tolerances below mean little
        initializer_range=0.2,
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-label (reranker-style) model folder."""
    return _write_model(tmp_path_factory.mktemp("ce") / "one-label", num_labels=1, seed=0)


@pytest.fixture(scope="module")
def two_label_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-label (classifier-style) model folder."""
    return _write_model(tmp_path_factory.mktemp("ce") / "two-label", num_labels=2, seed=1)


QUESTION = "Which river flows through the capital of Hungary?"


def candidates() -> list[Candidate]:
    return [
        Candidate("c-capital", "Budapest", "Budapest is the capital of Hungary.", {"bm25_rank": 1}),
        Candidate("c-cats", "Cats", "Cats sleep a lot.", {"bm25_rank": 2}),
        Candidate("c-danube", "Danube", "The Danube flows through Budapest.", {"bm25_rank": 3}),
        Candidate("c-untitled", "", "Vienna is a city on a river.", {"bm25_rank": 4}),
        Candidate("c-bread", "Bread", "Bread is baked from flour.", {"bm25_rank": 5}),
    ]


def ranked(probabilities: Mapping[str, float]) -> list[str]:
    """Chunk ids by probability, highest first; ties keep the candidates' order."""
    return sorted(probabilities, key=lambda cid: -probabilities[cid])


# -- configuration -----------------------------------------------------------------------------


def test_missing_setting_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"judge\.cross_encoder_path is not set"):
        CrossEncoderJudge(None)
    settings = Settings(
        data_dir=tmp_path / "data", embedding={"model": "none"}, judge={"name": "cross-encoder"}
    )
    assert settings.judge.cross_encoder_path is None
    with Components(settings) as parts, pytest.raises(ConfigError, match=r"judge\.cross_encoder_path"):
        make_judge("cross-encoder", parts)


def test_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"judge\.cross_encoder_path=.*nope.*is not a folder"):
        CrossEncoderJudge(tmp_path / "nope")


def test_folder_without_a_model_fails_on_first_use(tmp_path: Path) -> None:
    judge = CrossEncoderJudge(tmp_path)  # a folder, so construction succeeds (lazy)
    assert not judge.loaded
    with pytest.raises(ConfigError, match="cannot load a sentence-transformers CrossEncoder"):
        judge.judge(QUESTION, candidates())
    assert not judge.loaded


def test_pair_text() -> None:
    assert pair_text(Candidate("a", "Danube", "It flows.")) == "Danube\nIt flows."
    assert pair_text(Candidate("b", "  ", "No title.")) == "No title."


# -- judging -----------------------------------------------------------------------------------


def test_one_probability_per_candidate_deterministic(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any hub access would fail the load
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    judge = CrossEncoderJudge(model_dir, batch_size=2)
    assert isinstance(judge, Judge)
    assert not judge.loaded  # lazy: nothing loaded before the first judgement
    cands = candidates()
    first = judge.judge(QUESTION, cands)
    assert judge.loaded
    second = judge.judge(QUESTION, cands)

    # one probability per candidate, in the candidates' order, each in 0..1
    assert list(first.probabilities) == [c.chunk_id for c in cands]
    assert all(0.0 <= p <= 1.0 for p in first.probabilities.values()), first.probabilities
    # the same numbers, bit for bit, and so the same order, on a repeated call
    assert dict(first.probabilities) == dict(second.probabilities)
    assert ranked(first.probabilities) == ranked(second.probabilities)
    # the texts reach the model: the probabilities are not one constant (a model that saw only
    # [UNK] tokens, or no passage, would score every pair alike)
    spread = max(first.probabilities.values()) - min(first.probabilities.values())
    assert spread > 1e-3, first.probabilities
    assert first.usage.calls == 3  # 5 pairs in batches of 2
    assert first.usage.input_tokens > 5 * 12  # every pair holds at least the question's pieces
    assert first.usage.seconds > 0.0
    assert first.usage.output_tokens == 0
    assert judge.judge(QUESTION, []).probabilities == {}

    # the same folder loaded again, and with another batch size, gives the same probabilities
    other = CrossEncoderJudge(model_dir, batch_size=32).judge(QUESTION, cands)
    assert other.usage.calls == 1
    assert other.usage.input_tokens == first.usage.input_tokens
    for cid, p in first.probabilities.items():
        assert other.probabilities[cid] == pytest.approx(p, abs=1e-6)


def test_one_label_probability_is_the_sigmoid_of_the_logit(model_dir: Path) -> None:
    """Equals sentence-transformers' own predict with its default (sigmoid) activation."""
    from sentence_transformers import CrossEncoder

    cands = candidates()
    result = CrossEncoderJudge(model_dir).judge(QUESTION, cands)
    reference = CrossEncoder(str(model_dir), local_files_only=True, device="cpu")
    expected = reference.predict(
        [(QUESTION, pair_text(c)) for c in cands], show_progress_bar=False
    )
    assert type(reference.activation_fn).__name__ == "Sigmoid"
    for c, e in zip(cands, expected):
        assert result.probabilities[c.chunk_id] == pytest.approx(float(e), abs=1e-6)


def test_two_label_probability_is_softmax_of_label_one(two_label_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    cands = candidates()
    result = CrossEncoderJudge(two_label_dir).judge(QUESTION, cands)
    assert result.detail["labels"] == 2
    reference = CrossEncoder(str(two_label_dir), local_files_only=True, device="cpu")
    expected = reference.predict(
        [(QUESTION, pair_text(c)) for c in cands], apply_softmax=True, show_progress_bar=False
    )
    assert np.asarray(expected).shape == (len(cands), 2)
    for c, row in zip(cands, expected):
        assert result.probabilities[c.chunk_id] == pytest.approx(float(row[1]), abs=1e-6)
        assert 0.0 < result.probabilities[c.chunk_id] < 1.0


# -- the SAG2 path end to end ------------------------------------------------------------------


CORPUS = {
    "budapest": ("Budapest", "Budapest is the capital city of Hungary."),
    "danube": ("Danube", "The Danube river flows through Budapest and Vienna."),
    "vienna": ("Vienna", "Vienna is a city on the Danube."),
    "cats": ("Cats", "Cats sleep in the city."),
    "bread": ("Bread", "Bread is baked from flour."),
    "moonlit": ("Moonlit Harbor", "Moonlit Harbor is a film directed by Elena Varga."),
}


@pytest.fixture
def ce_search(tmp_path: Path, model_dir: Path) -> Iterator[HybridSearch]:
    settings = Settings(
        data_dir=tmp_path / "data",
        embedding={"model": "none"},
        judge={"name": "cross-encoder", "cross_encoder_path": str(model_dir)},
    )
    hs = HybridSearch(settings)
    hs.ingest_documents(
        [make_document(rid, text, title=title) for rid, (title, text) in CORPUS.items()],
        mode="passage",
    )
    try:
        yield hs
    finally:
        hs.close()


def test_sag2_path_runs_end_to_end(ce_search: HybridSearch, model_dir: Path) -> None:
    response = ce_search.search(QUESTION, paths=["sag2"], top_k=10)
    assert not response.degraded, response.reasons
    assert response.results
    usage = response.usage["sag2"]
    assert usage["judge_calls"] >= 1
    assert usage["judge_input_tokens"] > 0
    assert usage["rounds"] in (0, 1)

    retriever = ce_search.components.retriever("sag2")
    assert isinstance(retriever.judge, CrossEncoderJudge)  # type: ignore[attr-defined]
    result = ce_search.run_path("sag2", QUESTION, limit=10, filters=Filters())
    hits = list(result.hits)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    # the path's probabilities are the judge's own for the same (question, title + text) pairs
    records = ce_search.components.store.chunks([h.chunk_id for h in hits])
    direct = CrossEncoderJudge(model_dir).judge(
        QUESTION,
        [Candidate(h.chunk_id, records[h.chunk_id].title, records[h.chunk_id].text) for h in hits],
    )
    for h in hits:
        assert h.judge_p is not None
        assert h.judge_p == pytest.approx(direct.probabilities[h.chunk_id], abs=1e-4)
        # the rank's score is the best probability at or below it (the evidence set may
        # lift a passage above a likelier one), so never below the passage's own
        assert 0.0 <= h.score <= 1.0
        assert h.score >= h.judge_p - 1e-4  # judge_p is rounded to 4 places
    # and the scores follow the ranks
    scores = [h.score for h in hits]
    assert all(a >= b - 1e-6 for a, b in zip(scores, scores[1:]))
    assert not math.isnan(sum(scores))
