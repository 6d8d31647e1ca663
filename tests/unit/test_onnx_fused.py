"""``embedding.fused_graph``: ONNX Runtime's fused transformer graph of a BERT model (one
Attention op a layer, fused LayerNorm and GELU), float32 or int8 row by row with the FFN's
second MatMul kept float32. What it promises: the recipe is in the export's folder name and the
index fingerprint, the graph is fused whole or refused, the vectors stay the model's (float32)
or within a small cosine of them (int8), a text's vector does not depend on its batch mates,
and a model it cannot fuse is refused with its type named."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from hybridsag.errors import ConfigError
from hybridsag.settings import EmbeddingSettings, Settings
from hybridsag.vectors.embedder import make_embedder
from hybridsag.vectors.embedder_common import PACKAGED_MODEL, resolve_backend
from hybridsag.vectors.onnx_embedder import (
    CONFIG_FILE,
    MODEL_FILE,
    OnnxEmbedder,
    build_onnx_model,
    onnx_model_dir,
)

TEXTS = [
    "Cats are small domestic felines that purr and hunt mice.",
    "Reciprocal rank fusion merges ranked lists by summing 1 / (k + rank).",
    "《红楼梦》是中国古典四大名著之一，作者是曹雪芹。",
    "def collapse_duplicates(hits, *, threshold=0.9):",
    "x",
    "",
    "A long passage that runs past the model's sequence limit. " * 30,
]


def onnx_settings(cache: Path, **embedding: object) -> Settings:
    fields = {"backend": "onnx", "onnx_cache_dir": cache, **embedding}
    return Settings(embedding=EmbeddingSettings(**fields))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def shared_onnx(_user_cache: Path) -> Path:
    """The run's shared export folder (where ``auto`` puts the float32 export)."""
    return _user_cache / "hybridsag" / "onnx"


@pytest.fixture(scope="module")
def fused_int8(shared_onnx: Path) -> OnnxEmbedder:
    return OnnxEmbedder(onnx_settings(shared_onnx, fused_graph=True, quantize=True))


def test_each_recipe_has_its_own_folder_and_fingerprint(tmp_path: Path) -> None:
    """The fused recipe is in the folder's name and digest and in the index fingerprint, so
    switching it re-exports and an index built with one refuses the other's vectors."""
    names = {}
    for quantize in (False, True):
        for fused in (False, True):
            settings = onnx_settings(tmp_path, quantize=quantize, fused_graph=fused)
            emb = OnnxEmbedder(settings)
            names[emb.precision] = (onnx_model_dir(settings).name, emb.fingerprint)
    assert sorted(names) == ["fp32", "fp32-fused", "int8-fused-w7", "int8-rowwise-w7"]
    for precision, (folder, fingerprint) in names.items():
        assert folder.startswith(f"{PACKAGED_MODEL}-{precision}-")
        assert fingerprint == f"{PACKAGED_MODEL}|onnx-{precision}"
    digests = {folder.rsplit("-", 1)[-1] for folder, _ in names.values()}
    assert len(digests) == 4
    assert list(tmp_path.iterdir()) == []  # naming exports nothing


def test_an_index_keeps_the_graph_it_was_built_with() -> None:
    """``auto`` gives a new index the setting, and an index the graph its fingerprint names."""
    fused = Settings(embedding={"fused_graph": True})
    new = resolve_backend(fused).embedding
    assert (new.backend, new.quantize, new.fused_graph) == ("onnx", False, True)
    kept = resolve_backend(fused, f"{PACKAGED_MODEL}|onnx-fp32").embedding
    assert (kept.quantize, kept.fused_graph) == (False, False)
    recorded = resolve_backend(Settings(), f"{PACKAGED_MODEL}|onnx-int8-fused-w7").embedding
    assert (recorded.quantize, recorded.fused_graph) == (True, True)


def test_the_setting_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ValidationError, match="fused_graph.*'sentence-transformers'"):
        EmbeddingSettings(backend="sentence-transformers", fused_graph=True)
    with pytest.raises(ValidationError, match=r"embedding\.fused_graph mean nothing.*'tei'"):
        EmbeddingSettings(backend="tei", fused_graph=False)
    assert EmbeddingSettings(backend="sentence-transformers").fused_graph is None


def test_the_fused_int8_graph_is_fused_whole_and_keeps_the_ffn_output_float32(
    fused_int8: OnnxEmbedder,
) -> None:
    import onnx

    folder = fused_int8.folder
    graph = onnx.load(str(folder / MODEL_FILE)).graph
    ops = Counter(node.op_type for node in graph.node)
    assert ops["Attention"] == 6 and ops["EmbedLayerNormalization"] == 1
    assert ops["SkipLayerNormalization"] == 12 and ops["BiasGelu"] == 6
    assert ops["MatMulInteger"] == 12  # each layer's attention output and FFN input
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    assert sorted(made_by[n.input[0]] for n in graph.node if n.op_type == "MatMul") == [
        "BiasGelu"
    ] * 6
    config = json.loads((folder / CONFIG_FILE).read_text("utf-8"))
    assert config["precision"] == "int8-fused-w7"
    assert config["probe_cosine_min"] >= 0.98
    assert fused_int8.fingerprint == f"{PACKAGED_MODEL}|onnx-int8-fused-w7"


def test_fused_int8_vectors_stay_near_float32_and_ignore_batch_mates(
    fused_int8: OnnxEmbedder, shared_onnx: Path
) -> None:
    """Cosine to the float32 vectors >= 0.99 on English, Chinese, code, a one-letter, an
    empty and an over-long text (2wiki, musique100, pycode and cmrc2018 passages: min 0.997,
    docs/benchmarks.md); each text's vector is the one it gets alone, whatever texts and
    padding share its run. The float32 vectors are the default's (the fused float32 graph,
    the plain graph's to a cosine of 1.0000), whose export the run shares."""
    float32 = OnnxEmbedder(onnx_settings(shared_onnx, quantize=False, fused_graph=True))
    cosines = (float32.encode(TEXTS) * fused_int8.encode(TEXTS)).sum(axis=1)
    assert cosines.min() >= 0.99, cosines
    alone = np.vstack([fused_int8.encode([t]) for t in TEXTS])
    rng = np.random.default_rng(3)
    for order in (rng.permutation(len(TEXTS)) for _ in range(3)):
        np.testing.assert_allclose(
            fused_int8.encode([TEXTS[i] for i in order]), alone[order], atol=1e-6
        )


def test_a_small_bert_fuses_with_its_own_head_count(small_model: Path, tmp_path: Path) -> None:
    """A one-layer BERT with 2 heads of 16 (not MiniLM's 12 of 32) fuses whole, and its fused
    float32 vectors are the model's own, padded in a batch or not."""
    import onnx
    from sentence_transformers import SentenceTransformer

    settings = onnx_settings(tmp_path, model=str(small_model), quantize=False, fused_graph=True)
    folder = build_onnx_model(settings)
    assert folder.name.startswith("model-fp32-fused-")
    ops = Counter(n.op_type for n in onnx.load(str(folder / MODEL_FILE)).graph.node)
    assert ops["Attention"] == 1 and ops["SkipLayerNormalization"] == 2
    emb = make_embedder(settings)
    assert emb is not None
    reference = SentenceTransformer(str(small_model), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(emb.encode(TEXTS), reference, atol=1e-5)


def test_a_model_that_is_not_bert_is_refused_by_name(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertTokenizerFast, DistilBertConfig, DistilBertModel, set_seed

    from hybridsag.vectors.embedder_common import resolve_model

    root = tmp_path_factory.mktemp("distilbert")
    tokenizer = BertTokenizerFast.from_pretrained(resolve_model(PACKAGED_MODEL))
    set_seed(0)
    config = DistilBertConfig(
        vocab_size=tokenizer.vocab_size, dim=32, n_layers=1, n_heads=2, hidden_dim=64
    )
    DistilBertModel(config).save_pretrained(root / "distil")
    tokenizer.save_pretrained(root / "distil")
    modules = [Transformer(str(root / "distil"), max_seq_length=128), Pooling(32, "mean")]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "model"))
    settings = onnx_settings(tmp_path, model=str(root / "model"), fused_graph=True)
    with pytest.raises(ConfigError, match="fuses BERT encoders.*'distilbert'"):
        build_onnx_model(settings)
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-made left behind
