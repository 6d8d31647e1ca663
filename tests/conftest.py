"""Fixtures shared by every test folder.

- ``_isolated_env`` (autouse): no ``HYBRIDSAG_*`` variable from the outer environment, and the
  working directory is the test's ``tmp_path``, so no ``config/hybridsag.toml`` or ``.env`` of the
  checkout is picked up by ``Settings()``.
- ``_user_cache`` (autouse, per session): the run's stand-in for the user's cache folder, the
  process's ``XDG_CACHE_HOME`` for the whole session (the ONNX exports are made there once a run).
- ``settings``: a lexical-only :class:`~hybridsag.settings.Settings` (``embedding.model =
  'none'``: no model loads) whose data dir is ``tmp_path / "data"``.
- ``hs``: a :class:`~hybridsag.search.HybridSearch` over ``settings``, closed after the test.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsag.search import HybridSearch
from hybridsag.settings import Settings

from tests.pgserver import (  # noqa: F401 - fixtures
    index_backends,
    postgres_server,
    postgres_url,
    store_url,
)


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's own temporary folder: under pytest-xdist, the one that every worker's
    own folder (its ``getbasetemp()``) sits in; without xdist, the session's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test run's stand-in for the user's cache folder (``XDG_CACHE_HOME``), one for all
    its xdist workers as a user's processes share theirs: the onnx export that
    ``embedding.backend = "auto"`` uses is made there once a run, at first use (two workers
    asking at once may both export; the first rename wins, as for any two processes). It is
    the process's ``XDG_CACHE_HOME`` for the whole session, so module fixtures (set up before
    a test's ``_isolated_env``) and the child processes they start use it too."""
    cache = _run_folder(tmp_path_factory) / "user-cache"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as session_env:
        session_env.setenv("XDG_CACHE_HOME", str(cache))
        yield cache


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.upper().startswith("HYBRIDSAG_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", embedding={"model": "none"})


@pytest.fixture
def hs(settings: Settings) -> Iterator[HybridSearch]:
    search = HybridSearch(settings)
    try:
        yield search
    finally:
        search.close()


@pytest.fixture(scope="session")
def onnx_cache_dir(_user_cache: Path) -> Path:
    """An ``embedding.onnx_cache_dir`` holding the int8 ONNX export of the packaged model, made
    once per test run (the export takes tens of seconds) by the real export path: the same
    folder the default backend (``auto``) exports its float32 model into, so the run makes
    each precision's export once. The xdist workers take turns on a lock, so the second finds
    the first's export whole instead of exporting beside it."""
    from hybridsag.vectors.onnx_embedder import build_onnx_model
    from hybridsag.settings import EmbeddingSettings

    root = _user_cache / "hybridsag" / "onnx"
    with open(_user_cache.parent / "onnx-int8-export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        build_onnx_model(
            Settings(
                data_dir=root / "unused",
                embedding=EmbeddingSettings(backend="onnx", onnx_cache_dir=root),
            )
        )
    return root


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers folder of the packaged model's kind (a BERT Transformer, mean
    Pooling, Normalize; the packaged model's tokenizer files) but one layer 32 wide, with
    seeded random weights. The real export path takes it as it takes the packaged model (the
    child process, torch's exporter, the probe check, the checksums and the rename) with less
    work in torch's exporter: ~15 s of CPU an export against ~20 s (most of either is the
    child's imports), for a test whose point is the export's mechanics, not the packaged
    model's vectors."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast, set_seed

    from hybridsag.vectors.embedder_common import PACKAGED_MODEL, resolve_model

    root = tmp_path_factory.mktemp("small-model")
    tokenizer = BertTokenizerFast.from_pretrained(resolve_model(PACKAGED_MODEL))
    set_seed(0)  # the same weights on every run
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        # wider than BERT's 0.02, so that texts get clearly different vectors (the cosine of
        # QUERY and "x" is 0.93) and a 1e-5 tolerance on a vector means something
        initializer_range=0.2,
    )
    BertModel(config).save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    modules = [
        Transformer(str(root / "bert"), max_seq_length=256), Pooling(32, "mean"), Normalize()
    ]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "model"))
    return root / "model"
