"""A local HTTP server that speaks the wire formats of the remote models hybridsag calls, for
tests and benchmarks (:class:`tests.scriptedserver.ScriptedServer`: real HTTP on 127.0.0.1).

Routes (POST, JSON), each checking its body's shape (422 otherwise) and, when the server has an
``api_key``, ``Authorization: Bearer <key>`` (401 otherwise, echoing the header it got)::

    /v1/embeddings        OpenAI-compatible embeddings   {"model", "input": [...], "dimensions"?}
    /embed                TEI embeddings                 {"inputs": [...]}
    /api/embed            Ollama embeddings              {"model", "input": [...]}
    /rerank               TEI rerank                     {"query", "texts": [...], "raw_scores"}
    /v1/rerank            Cohere/Jina-style rerank       {"model", "query", "documents": [...]}
    /score                vLLM score                     {"text_1", "text_2": [...]}
    /v1/chat/completions  OpenAI-compatible chat with logprobs (the yes/no judge)

The model behind them (``encoder``): :class:`HashEncoder` by default, a deterministic bag of
hashed words (texts that share words have a positive cosine; nothing to load), or, for
benchmarks, the packaged embedding model through hybridsag's own local embedder
(:func:`packaged_encoder`): the embeddings routes then return exactly the local embedder's
vectors. Vectors go out as JSON numbers of the float32 values, so they come back bit for bit.

Scores (:meth:`ModelServer.logit`): the rerank routes score a pair by the cosine of the query's and
the passage's vectors, as the logit ``10 * (cos - 0.5)`` (a passage containing ``GOLD`` has
cos 1); TEI returns that logit with ``raw_scores: true`` and its sigmoid otherwise, Cohere's
``relevance_score`` and vLLM's ``score`` are the sigmoid. The chat route answers "Yes" or "No"
with ``top_logprobs`` where p(yes) is :func:`tests.jevserver.score` of the question and the
passage block (so GOLD ranks first), or the sigmoid of the logit with ``chat_scorer="cosine"``.

Usage: ``usage.prompt_tokens`` (OpenAI, vLLM), ``prompt_eval_count`` (Ollama), the
``x-compute-tokens`` header (TEI), ``usage.total_tokens`` (Cohere/Jina): the number of words.

Faults (``server.script(...)``, one per request in arrival order), beyond ``ok``, ``delay`` and
``status``: ``malformed`` (broken JSON), ``nan`` (a NaN literal among the numbers), ``huge``
(1e39, past float32), ``string_value`` (a number sent as a string), ``fewer`` (one vector or
score fewer than asked), ``duplicate_index`` (an index twice), ``wrong_dimension`` (the first
vector one number short), ``out_of_range`` (a score of 1.5), ``neither`` (chat: no yes/no among
the top tokens), ``no_logprobs`` (chat: a choice without logprobs).

Run it as a process for benchmarks: ``python -m tests.modelserver --port 18601 --model
packaged``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from tests.jevserver import score as word_score
from tests.scriptedserver import Fault, RecordedRequest, Reply, ScriptedServer

__all__ = [
    "ROUTES",
    "HashEncoder",
    "ModelServer",
    "model_server_fixture",
    "packaged_encoder",
]

ROUTES = (
    "/v1/embeddings",
    "/embed",
    "/api/embed",
    "/rerank",
    "/v1/rerank",
    "/score",
    "/v1/chat/completions",
)
_WORD = re.compile(r"[a-z0-9]+")
_PASSAGE = re.compile(r"<passage>\nTitle: (.*?)\n\n(.*?)\n</passage>", re.DOTALL)
_QUESTION = re.compile(r'"question": (".*?(?<!\\)")', re.DOTALL)
#: the rerank logit of a pair: LOGIT_SCALE * (cos - LOGIT_CENTRE)
LOGIT_SCALE, LOGIT_CENTRE = 10.0, 0.5


class HashEncoder:
    """Unit vectors of hashed lowercase words (``[a-z0-9]+``): deterministic, numpy only."""

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                digest = hashlib.sha256(word.encode()).digest()
                out[i, int.from_bytes(digest[:4], "big") % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def packaged_encoder(*, memo: bool = True) -> Callable[[Sequence[str]], np.ndarray]:
    """The packaged model through hybridsag's local embedder (``embedding.backend = "auto"``),
    as ``hybridsag eval`` embeds with it: the vectors a local dense path would have. With
    ``memo`` each text is embedded once per process (a stand-in's shortcut, so that a benchmark
    that reranks the same passages for many questions measures the wiring, not the model)."""
    from hybridsag.vectors.embedder import make_embedder
    from hybridsag.settings import Settings

    embedder = make_embedder(Settings(data_dir="/tmp/modelserver-unused"))
    assert embedder is not None
    seen: dict[str, np.ndarray] = {}

    def encode(texts: Sequence[str]) -> np.ndarray:
        if not memo:
            return embedder.encode(list(texts), kind="passage")
        todo = list(dict.fromkeys(t for t in texts if t not in seen))
        if todo:
            seen.update(zip(todo, embedder.encode(todo, kind="passage")))
        return np.stack([seen[t] for t in texts])

    return encode


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


class ModelServer(ScriptedServer):
    """The server (module docstring). ``encoder(texts) -> unit float32 rows``."""

    def __init__(
        self,
        *,
        encoder: Callable[[Sequence[str]], np.ndarray] | None = None,
        api_key: str | None = None,
        chat_scorer: str = "words",
        latency_s: float = 0.0,
        port: int = 0,
    ) -> None:
        super().__init__(latency_s=latency_s, port=port)
        self.encoder = encoder or HashEncoder()
        self.api_key = api_key
        self.chat_scorer = chat_scorer
        self._encode_lock = threading.Lock()

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    # -- the model ------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._encode_lock:  # a local tokenizer is not safe to share between threads
            return np.asarray(self.encoder(texts), dtype=np.float32)

    def logit(self, query: str, passages: Sequence[str]) -> list[float]:
        """The rerank logit of each (query, passage) pair (module docstring)."""
        vecs = self.encode([query, *passages])
        cos = vecs[1:] @ vecs[0]
        return [
            LOGIT_SCALE * ((1.0 if "GOLD" in p else float(c)) - LOGIT_CENTRE)
            for p, c in zip(passages, cos)
        ]

    # -- routing --------------------------------------------------------------------------------

    def respond(self, record: RecordedRequest, fault: Fault) -> Reply:
        if record.path not in ROUTES:
            return Reply.json(404, {"error": {"message": f"no route {record.path}"}})
        auth = record.headers.get("authorization", "")
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            return Reply.json(401, {"error": {"message": f"invalid authorization header {auth!r}"}})
        if fault.kind == "status":
            err = {"error": {"message": f"scripted {fault.status} for {auth!r}"}}
            return Reply(fault.status, json.dumps(err).encode("utf-8"), fault.headers)
        if fault.kind == "malformed":
            return Reply(200, b'{"data": [{"index": 0, "embedding": [0.1, ')
        body = record.body if isinstance(record.body, dict) else {}
        try:
            payload, headers = self._answer(record.path, body, fault)
        except _BadRequest as exc:
            return Reply.json(422, {"error": {"message": str(exc)}})
        text = json.dumps(payload)
        if fault.kind == "nan":
            text = re.sub(r"(-?\d+\.\d+(e-?\d+)?)", "NaN", text, count=1)
        elif fault.kind == "huge":
            text = re.sub(r"(-?\d+\.\d+(e-?\d+)?)", "1e39", text, count=1)
        elif fault.kind == "string_value":
            text = re.sub(r"(-?\d+\.\d+(e-?\d+)?)", r'"\1"', text, count=1)
        return Reply(200, text.encode("utf-8"), headers)

    def _answer(self, path: str, body: dict[str, Any], fault: Fault) -> tuple[Any, dict[str, str]]:
        if path in ("/v1/embeddings", "/embed", "/api/embed"):
            return self._embeddings(path, body, fault)
        if path == "/v1/chat/completions":
            return self._chat(body, fault), {}
        return self._rerank(path, body, fault)

    # -- embeddings -----------------------------------------------------------------------------

    def _embeddings(
        self, path: str, body: dict[str, Any], fault: Fault
    ) -> tuple[Any, dict[str, str]]:
        key = "inputs" if path == "/embed" else "input"
        texts = _strings(body.get(key), key)
        if path != "/embed" and not isinstance(body.get("model"), str):
            raise _BadRequest("model must be a string")
        vectors = [[float(x) for x in row] for row in self.encode(texts)]
        dims = body.get("dimensions")
        if dims is not None:  # OpenAI's shortened vectors: the first d numbers, renormalised
            if not isinstance(dims, int) or dims < 1:
                raise _BadRequest("dimensions must be a positive integer")
            cut = np.asarray([row[:dims] for row in vectors], dtype=np.float32)
            cut /= np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)
            vectors = [[float(x) for x in row] for row in cut]
        if fault.kind == "wrong_dimension":
            vectors[0] = vectors[0][:-1]
        if fault.kind == "fewer":
            vectors = vectors[:-1]
        tokens = sum(len(_WORD.findall(t.lower())) for t in texts)
        if path == "/embed":
            return vectors, {"x-compute-tokens": str(tokens)}
        if path == "/api/embed":
            return {"model": body["model"], "embeddings": vectors, "prompt_eval_count": tokens}, {}
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        data.reverse()  # any order: the client sorts by index
        if fault.kind == "duplicate_index":
            data[0]["index"] = data[1]["index"] if len(data) > 1 else 0
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }, {}

    # -- rerank ---------------------------------------------------------------------------------

    def _rerank(self, path: str, body: dict[str, Any], fault: Fault) -> tuple[Any, dict[str, str]]:
        if path == "/score":
            query = body.get("text_1")
            passages = _strings(body.get("text_2"), "text_2")
        else:
            query = body.get("query")
            passages = _strings(body.get("texts" if path == "/rerank" else "documents"), "texts")
        if not isinstance(query, str) or not query:
            raise _BadRequest("the query must be a non-empty string")
        if path == "/v1/rerank" and not isinstance(body.get("model"), str):
            raise _BadRequest("model must be a string")
        logits = self.logit(query, passages)
        raw = path == "/rerank" and body.get("raw_scores") is True
        scores = [x if raw else _sigmoid(x) for x in logits]
        if fault.kind == "out_of_range":
            scores[0] = 1.5
        key = "relevance_score" if path == "/v1/rerank" else "score"
        entries = [{"index": i, key: s} for i, s in enumerate(scores)]
        entries.sort(key=lambda e: -e[key])  # best first, as the real servers answer
        if fault.kind == "fewer":
            entries = entries[:-1]
        if fault.kind == "duplicate_index" and len(entries) > 1:
            entries[1]["index"] = entries[0]["index"]
        tokens = sum(len(_WORD.findall(t.lower())) for t in [query, *passages])
        if path == "/rerank":
            return entries, {"x-compute-tokens": str(tokens)}
        if path == "/v1/rerank":
            return {"model": body["model"], "results": entries,
                    "usage": {"total_tokens": tokens}}, {}
        return {"data": [{"object": "score", **e} for e in entries],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, {}

    # -- chat -----------------------------------------------------------------------------------

    def _chat(self, body: dict[str, Any], fault: Fault) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("messages must be a non-empty list")
        if body.get("logprobs") is not True or not isinstance(body.get("top_logprobs"), int):
            raise _BadRequest("this test server answers only logprobs=true with top_logprobs")
        user = str(messages[-1].get("content", ""))
        found = _PASSAGE.search(user)
        qfound = _QUESTION.search(user)
        if found is None or qfound is None:
            raise _BadRequest("no state question or passage block in the last message")
        question = json.loads(qfound.group(1))
        passage = f"{found.group(1)}\n{found.group(2)}"
        if self.chat_scorer == "cosine":
            p = _sigmoid(self.logit(question, [passage])[0])
        else:
            p = word_score(question, passage)
        p = min(max(p, 1e-4), 1.0 - 1e-4)
        top = [("Yes", math.log(p)), ("No", math.log(1.0 - p)), ("Maybe", math.log(1e-5)),
               (" The", math.log(1e-6))]
        if fault.kind == "neither":
            top = [("Maybe", -0.1), ("Perhaps", -2.5)]
        top.sort(key=lambda t: -t[1])
        top = top[: body["top_logprobs"]]
        token, logprob = top[0]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": token},
            "finish_reason": "length",
            "logprobs": {"content": [{"token": token, "logprob": logprob,
                                      "top_logprobs": [{"token": t, "logprob": lp}
                                                       for t, lp in top]}]},
        }
        if fault.kind == "no_logprobs":
            choice["logprobs"] = None
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [choice],
            "usage": {"prompt_tokens": -(-len(user) // 4), "completion_tokens": 1},
        }


class _BadRequest(ValueError):
    pass


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise _BadRequest(f"{name} must be a non-empty list of strings")
    return value


@pytest.fixture(name="model_server")
def model_server_fixture() -> Iterator[ModelServer]:
    """A started :class:`ModelServer` (hash encoder, no key); stopped after the test."""
    with ModelServer() as server:
        yield server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="serve the model wire formats on 127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", choices=("hash", "packaged"), default="hash")
    ap.add_argument("--chat-scorer", choices=("words", "cosine"), default="cosine")
    ap.add_argument("--no-memo", action="store_true", help="embed every text of every request")
    args = ap.parse_args(argv)
    encoder = packaged_encoder(memo=not args.no_memo) if args.model == "packaged" else HashEncoder()
    server = ModelServer(encoder=encoder, chat_scorer=args.chat_scorer, port=args.port)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    print(f"serving {server.url}", flush=True)
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
