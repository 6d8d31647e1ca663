"""The ``cross-encoder`` judge: a local sentence-transformers CrossEncoder scores every pair.

For teams that already keep a cross-encoder (reranker) model on disk. No such model ships inside
any PyPI package, so this judge is never the default; ``judge.name =
"cross-encoder"`` with ``judge.cross_encoder_path`` pointing at the model folder selects it.

Contract (see :class:`hybridsag.judges.base.Judge`):

- **Offline only.** The model is loaded from a local folder with ``local_files_only=True`` and
  ``trust_remote_code=False``; nothing is downloaded and the process environment is not changed.
- **Lazy.** Importing sentence-transformers and torch takes seconds, so nothing is imported or
  loaded before the first :meth:`CrossEncoderJudge.judge` (or :meth:`CrossEncoderJudge.load`);
  the model is loaded once, under a lock. Judgements are serialised by a second lock (a fast
  tokenizer is not safe to share between threads).
- **Pairs.** Each candidate is scored as the pair ``(question, title + "\\n" + text)`` (just the
  text when it has no title), in batches of ``batch_size``, truncated to the model's maximum
  length. A cross-encoder sees one pair at a time: ``evidence`` and ``provisional`` are accepted
  and ignored.
- **Probabilities.** The model's raw outputs (logits) are read with its own activation switched
  off, then squashed here: one output (``num_labels = 1``, the usual reranker head) gives
  ``sigmoid(logit)``; two or more outputs give ``softmax(logits)[1]`` (label 1 is "relevant" in
  binary classification heads). A model saved with a sigmoid activation (the sentence-transformers
  default for one label) therefore gets exactly the numbers its own ``predict`` would give; a model
  saved with another activation (identity, tanh) is still mapped into 0..1 by the same squash.
  The order of the candidates is what the model says either way (SAG2 ranks, it does not cut).
- **Usage.** ``calls`` is the number of batches run, ``input_tokens`` the tokenizer's count of the
  (truncated) pairs, ``seconds`` the wall time of the judgement.
- **Errors.** :class:`~hybridsag.errors.ConfigError` when the setting is missing, the folder does
  not exist, sentence-transformers is not installed, or the folder is not a model that loads;
  :class:`~hybridsag.errors.JudgeError` when inference fails or the model returns a wrong count
  or a non-finite score (never a default in place of a bad answer).

Example::

    judge = CrossEncoderJudge("/models/my-reranker")
    judge.judge("Who directed Alien?", [Candidate("c1", "Alien", "Alien is a film ...")])
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from hybridsag.errors import ConfigError, JudgeError
from hybridsag.judges.base import Candidate, JudgeResult, JudgeUsage
from hybridsag.once import Once

if TYPE_CHECKING:
    from hybridsag.parts import Parts

__all__ = ["CrossEncoderJudge", "build", "pair_text"]

_SETTING = "judge.cross_encoder_path"


def pair_text(candidate: Candidate) -> str:
    """The passage side of the pair: ``title`` and ``text`` on two lines, or the text alone."""
    title = candidate.title.strip()
    return f"{title}\n{candidate.text}" if title else candidate.text


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60.0, 60.0)))


def _softmax_label1(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e[:, 1] / e.sum(axis=1)


class CrossEncoderJudge:
    """A local sentence-transformers CrossEncoder as a :class:`~hybridsag.judges.base.Judge`.

    ``path``: the model folder (a CrossEncoder saved by sentence-transformers, or a Hugging Face
    sequence-classification model with its tokenizer). ``device``: where the model runs
    (``"cpu"``, ``"cuda"``, ...). ``batch_size``: pairs per forward pass. ``max_length``: token
    limit of a pair (None: the model's own).

    Raises :class:`ConfigError` at once when ``path`` is None or not a folder; loading errors
    surface on the first judgement (see the module docstring).
    """

    name = "cross-encoder"

    def __init__(
        self,
        path: Path | str | None,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        max_length: int | None = None,
    ) -> None:
        if path is None or not str(path).strip():
            raise ConfigError(
                f"{_SETTING} is not set; the cross-encoder judge needs a local "
                "sentence-transformers CrossEncoder folder (HYBRIDSAG_JUDGE__CROSS_ENCODER_PATH), "
                "or choose another judge (judge.name: features, jev, none)"
            )
        folder = Path(path).expanduser()
        if not folder.is_dir():
            raise ConfigError(
                f"{_SETTING}={str(path)!r} is not a folder ({folder.resolve()}); point it at a "
                "local CrossEncoder model folder (nothing is downloaded)"
            )
        if batch_size < 1:
            raise ConfigError(f"cross-encoder batch_size must be >= 1, got {batch_size}")
        if max_length is not None and max_length < 8:
            raise ConfigError(f"cross-encoder max_length must be >= 8, got {max_length}")
        self.path = folder.resolve()
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._model: Once[Any] = Once(self._build_model)
        self._run_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CrossEncoderJudge(path={str(self.path)!r}, device={self.device!r})"

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded yet."""
        return self._model.built

    def load(self) -> Any:
        """Load the model now (once; later calls return it). Raises :class:`ConfigError`."""
        return self._model.get()

    def _build_model(self) -> Any:
        from hybridsag.vectors.embedder import load_quietly
        from hybridsag.vectors.embedder_common import needs

        with needs(
            "the cross-encoder judge needs sentence-transformers and torch (pip install "
            "'sentence-transformers>=5,<7' torch), or choose another judge"
        ):
            import torch
            from sentence_transformers import CrossEncoder

        return load_quietly(
            lambda: CrossEncoder(
                str(self.path),
                device=self.device,
                local_files_only=True,
                trust_remote_code=False,
                max_length=self.max_length,
                activation_fn=torch.nn.Identity(),  # raw logits; squashed in judge()
            ),
            failed=f"{_SETTING}={str(self.path)!r}: cannot load a sentence-transformers "
            f"CrossEncoder from it on device {self.device!r}",
        )

    def judge(
        self,
        question: str,
        candidates: Sequence[Candidate],
        *,
        evidence: Sequence[Candidate] = (),
        provisional: Mapping[str, float] | None = None,
    ) -> JudgeResult:
        """One probability per candidate (see the module docstring); ``evidence`` and
        ``provisional`` are ignored."""
        t0 = time.perf_counter()
        if not candidates:
            return JudgeResult({}, JudgeUsage())
        ids = [c.chunk_id for c in candidates]
        if len(set(ids)) != len(ids):
            raise JudgeError("cross-encoder judge: duplicate chunk ids among the candidates")
        model = self.load()
        questions = [question] * len(candidates)
        texts = [pair_text(c) for c in candidates]
        with self._run_lock:
            try:
                logits = model.predict(
                    list(zip(questions, texts)),
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
                tokens = self._count_tokens(model, questions, texts)
            except Exception as exc:  # noqa: BLE001 - inference failures become JudgeError
                raise JudgeError(
                    f"cross-encoder judge ({self.path.name}) failed on {len(candidates)} pairs: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        scores = np.asarray(logits, dtype=np.float64)
        if scores.ndim == 1:
            probs = _sigmoid(scores)
        elif scores.ndim == 2 and scores.shape[1] == 1:
            probs = _sigmoid(scores[:, 0])
        elif scores.ndim == 2 and scores.shape[1] >= 2:
            probs = _softmax_label1(scores)
        else:
            raise JudgeError(
                f"cross-encoder judge: the model returned scores of shape {scores.shape} "
                f"for {len(candidates)} pairs"
            )
        if probs.shape[0] != len(candidates):
            raise JudgeError(
                f"cross-encoder judge: the model returned {probs.shape[0]} scores "
                f"for {len(candidates)} pairs"
            )
        bad = [ids[i] for i, p in enumerate(probs) if not math.isfinite(float(p))]
        if bad:
            raise JudgeError(f"cross-encoder judge: non-finite score for {bad[:5]}")
        batches = -(-len(candidates) // self.batch_size)
        return JudgeResult(
            probabilities={cid: float(p) for cid, p in zip(ids, probs)},
            usage=JudgeUsage(
                calls=batches,
                input_tokens=tokens,
                seconds=time.perf_counter() - t0,
            ),
            detail={
                "model": str(self.path),
                "labels": int(scores.shape[1]) if scores.ndim == 2 else 1,
            },
        )

    @staticmethod
    def _count_tokens(model: Any, questions: list[str], texts: list[str]) -> int:
        encoded = model.tokenizer(
            questions, texts, truncation=True, max_length=model.max_seq_length
        )
        return int(sum(len(ids) for ids in encoded["input_ids"]))


def build(parts: Parts) -> CrossEncoderJudge:
    """Registry factory: the folder from ``judge.cross_encoder_path`` (ConfigError when unset),
    on ``embedding.device`` (the one device setting for local models)."""
    s = parts.settings
    return CrossEncoderJudge(s.judge.cross_encoder_path, device=s.embedding.device)
