#!/usr/bin/env python3
"""How fast ONNX Runtime runs each way of exporting the embedding model, against torch (not a test).

    python benchmarks/onnx_export_speed.py [--corpus ../shared/data/2wiki/corpus.jsonl] [--n 512]
        [--repeat 3] [--work /tmp/onnx-export-speed]

Exports the packaged model (float32) three ways into ``--work`` (once; kept for the next run):

- ``shipped``: :func:`hybridsag.vectors.onnx_export.export_onnx_model`, the export the onnx
  backend makes (``torch.onnx.export(dynamo=True)``);
- ``torchscript``: the same module through the TorchScript exporter (``dynamo=False``, opset
  17, eager attention);
- ``torchscript+ort-optimizer``: that graph through ONNX Runtime's transformer optimizer
  (``model_type="bert"``), which fuses what it recognises (its fused-operator counts are printed).

Each graph gets a folder of its own beside the shipped export's tokenizer and ``embedder.json``,
and is run by the onnx backend's own encoding (its tokenizer, longest first, batches of
``embedding.batch_size``, its pooling, then ``normalise_rows``): only the graph differs. Then,
alternating per repeat so that a change in the machine's load slows each alike, it embeds the
first ``--n`` passages of ``--corpus`` with each graph and with ``SentenceTransformer.encode``.
Prints JSON: passages/s (median and runs) of each, the ratio of each to
``SentenceTransformer.encode``, and each graph's smallest cosine to torch's vectors.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hybridsag.settings import Settings
from hybridsag.vectors.embedder import quiet_weight_loading
from hybridsag.vectors.embedder_common import normalise_rows, resolve_model
from hybridsag.vectors.onnx_embedder import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    _Model,
)
from hybridsag.vectors.onnx_export import export_onnx_model

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embed_throughput import read_passages  # noqa: E402

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def _torchscript_export(source: Path, target: Path, example: dict[str, Any]) -> None:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(
            Encoder(), tuple(example[n] for n in INPUTS), str(target), input_names=INPUTS,
            output_names=["token_embeddings"],
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in INPUTS},
            opset_version=17, dynamo=False,
        )  # fmt: skip


def _graphs(work: Path, source: Path, tokenizer: Any) -> tuple[dict[str, Path], dict[str, int]]:
    """The three export folders (made once, then reused) and the optimizer's fused-op counts."""
    shipped = work / "shipped"
    if not (shipped / MODEL_FILE).exists():
        shipped.mkdir(parents=True, exist_ok=True)
        export_onnx_model(source, shipped, quantize=False)
    folders = {"shipped": shipped}
    for name in ("torchscript", "torchscript+ort-optimizer"):
        folders[name] = work / name
        folders[name].mkdir(exist_ok=True)
        for shared in (TOKENIZER_FILE, CONFIG_FILE):
            shutil.copyfile(shipped / shared, folders[name] / shared)
    script = folders["torchscript"] / MODEL_FILE
    if not script.exists():
        example = tokenizer(["a short probe", "a second, longer probe text"], padding=True,
                            return_tensors="pt")  # fmt: skip
        _torchscript_export(source, script, example)
    optimised = folders["torchscript+ort-optimizer"] / MODEL_FILE
    counts = folders["torchscript+ort-optimizer"] / "fused.json"
    if not optimised.exists() or not counts.exists():
        from onnxruntime.transformers.optimizer import optimize_model

        graph = optimize_model(str(script), model_type="bert", num_heads=0, hidden_size=0,
                               opt_level=0)  # fmt: skip
        graph.save_model_to_file(str(optimised))
        fused = {k: v for k, v in graph.get_fused_operator_statistics().items() if v}
        counts.write_text(json.dumps(fused) + "\n", "utf-8")
    return folders, json.loads(counts.read_text("utf-8"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path("/work/shared/data/2wiki/corpus.jsonl"))
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnx-export-speed"))
    args = ap.parse_args()

    from sentence_transformers import SentenceTransformer

    settings = Settings()
    source = resolve_model(settings.embedding.model)
    with quiet_weight_loading():
        st = SentenceTransformer(str(source), device="cpu", local_files_only=True)
    batch = settings.embedding.batch_size
    texts = read_passages(args.corpus, args.n)
    folders, fused = _graphs(args.work, source, st[0].tokenizer)
    models = {name: _Model(folder) for name, folder in folders.items()}

    reference = st.encode(texts, batch_size=batch, normalize_embeddings=True)
    rates: dict[str, list[float]] = {name: [] for name in [*models, "sentence-transformers"]}
    cosine: dict[str, float] = {}
    for _ in range(args.repeat):
        for name, model in models.items():
            t0 = time.perf_counter()
            vectors = normalise_rows(model.embed(texts, batch))
            rates[name].append(len(texts) / (time.perf_counter() - t0))
            cosine[name] = round(float((vectors * reference).sum(axis=1).min()), 6)
        t0 = time.perf_counter()
        st.encode(texts, batch_size=batch, normalize_embeddings=True)
        rates["sentence-transformers"].append(len(texts) / (time.perf_counter() - t0))
    ref = statistics.median(rates["sentence-transformers"])
    print(json.dumps({
        "passages": len(texts),
        "ort_optimizer_fused": fused,
        "passages_per_s_median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "passages_per_s_runs": {k: [round(r, 1) for r in v] for k, v in rates.items()},
        "ratio_to_sentence_transformers_encode": {
            k: round(statistics.median(v) / ref, 2) for k, v in rates.items()
        },
        "min_cosine_to_torch": cosine,
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
