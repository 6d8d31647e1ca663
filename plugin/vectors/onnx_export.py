"""The ONNX export of an embedding model (:mod:`hybridsag.vectors.onnx_embedder` runs it in a
child Python process, because it imports torch, transformers and sentence-transformers; the
process that encodes and searches never does): :func:`export_onnx_model` writes the graph (the
plain ``torch.onnx.export`` one, or ONNX Runtime's fused BERT graph), the tokenizer, the config
the encoder reads and their checksums into one folder, after checking the graph's vectors
against the sentence-transformers model on a few probe texts; :func:`quantize_rows` is its int8
recipe.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridsag.errors import ConfigError
from hybridsag.vectors.embedder_common import normalise_rows
from hybridsag.vectors.onnx_embedder import (
    _CHECKED_FILES,
    CHECKSUM_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    PROBE_FLOOR,
    RECIPE,
    TOKENIZER_FILE,
    _Model,
    _precision,
    _sha256,
    report_failures,
)

__all__ = ["export_onnx_model", "main", "quantize_rows"]

_OPSET = 18

#: Op types whose output, fed to a MatMul, keeps that MatMul float32 in the fused int8 graph:
#: the FFN's second MatMul. Quantised alone, those six cost MiniLM a cosine of 0.935 mean /
#: 0.905 min (2wiki), where each other group cost <= 0.005 (docs/benchmarks.md, issue 39).
_FLOAT_AFTER = ("BiasGelu", "Gelu", "FastGelu")
#: The name the fused export registers its attention function under (in the export's child).
_CLASSIC_ATTENTION = "hybridsag_additive_mask"
#: quantize_rows' weight levels each side of zero (7 bits; its docstring says why not 127).
_WEIGHT_LEVELS = 63

_PROBES = (
    "what is reciprocal rank fusion?",
    "Cats are small domestic felines that purr and hunt mice.",
    "哪一年举办了第一届现代奥林匹克运动会？",
    "",
    "A long passage that runs past the model's sequence limit. " * 40,
)


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
    """``python -m hybridsag.vectors.onnx_export --source MODEL --out FOLDER``: export one model
    into one empty folder (what :func:`~hybridsag.vectors.onnx_embedder.build_onnx_model`'s
    child process runs). Exit 2 on a configuration error, 1 on another failure, the reason on
    stderr's last marked line."""
    parser = argparse.ArgumentParser(
        prog="python -m hybridsag.vectors.onnx_export",
        description="Export one sentence-transformers model folder to ONNX.",
    )
    parser.add_argument(
        "--source", type=Path, required=True, help="a sentence-transformers model folder"
    )
    parser.add_argument("--out", type=Path, required=True, help="an empty folder to export into")
    parser.add_argument("--quantize", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--fused-graph", action=argparse.BooleanOptionalAction, default=False)
    args = parser.parse_args(argv)
    return report_failures(
        lambda: export_onnx_model(
            args.source, args.out, quantize=args.quantize, fused=args.fused_graph
        )
    )


if __name__ == "__main__":
    sys.exit(main())
