"""Export-time benchmark: onnx_export.dynamo_export against torch.onnx.export(dynamo=True).

Both exporters run in this one process on the same models. For each model it prints:
success, export wall time of each and their ratio, ONNX node count of each, ONNX Runtime
latency of each exported model, and the max abs diff of each against eager PyTorch.

    python bench/bench_export.py [--repeat 3] [--models bert,gpt2]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from torch.utils import _pytree as pytree

import onnx_export

#: Both exporters target the same opset (ours defaults to 18; torch.onnx to 20).
OPSET = 18


def _small_modules() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]]:
    nn = torch.nn
    return {
        "mlp": lambda: (
            nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).eval(),
            (torch.randn(8, 16),),
        ),
        "cnn": lambda: (
            nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(8 * 8 * 8, 10),
            ).eval(),
            (torch.randn(2, 3, 16, 16),),
        ),
        "transformer_layer": lambda: (
            nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval(),
            (torch.randn(2, 10, 32),),
        ),
        "lstm": lambda: (nn.LSTM(8, 16, batch_first=True).eval(), (torch.randn(2, 5, 8),)),
    }


class _with_mask(torch.nn.Module):
    """Calls a decoder as ``model(input_ids, attention_mask=...)`` (its 2nd arg is the cache)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.model(input_ids, attention_mask=attention_mask).last_hidden_state


def _transformers_models() -> dict[str, Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]]]:
    import transformers as tf

    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)

    def bert() -> tuple[torch.nn.Module, tuple[Any, ...]]:
        cfg = tf.BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=64,
        )
        return tf.BertModel(cfg).eval(), (ids, mask)

    def gpt2() -> tuple[torch.nn.Module, tuple[Any, ...]]:
        cfg = tf.GPT2Config(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False
        )
        return _with_mask(tf.GPT2Model(cfg).eval()), (ids, mask)

    def llama() -> tuple[torch.nn.Module, tuple[Any, ...]]:
        cfg = tf.LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            use_cache=False,
        )
        return _with_mask(tf.LlamaModel(cfg).eval()), (ids, mask)

    return {"bert": bert, "gpt2": gpt2, "llama": llama}


def _ort_latency_and_diff(
    proto_bytes: bytes, inputs: list[np.ndarray], expected: list[np.ndarray], runs: int = 50
) -> tuple[float, float]:
    session = ort.InferenceSession(proto_bytes, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in session.get_inputs()], inputs, strict=True))
    outputs = session.run(None, feed)
    diff = max(float(np.abs(e - g).max()) for e, g in zip(expected, outputs, strict=False))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, diff


def _ours(model: torch.nn.Module, args: tuple[Any, ...]) -> tuple[float, bytes, int]:
    start = time.perf_counter()
    program = onnx_export.dynamo_export(
        model, *args, export_options=onnx_export.ExportOptions(opset_version=OPSET)
    )
    seconds = time.perf_counter() - start
    return seconds, program.model_proto.SerializeToString(), program.model.graph.num_nodes()


def _theirs(model: torch.nn.Module, args: tuple[Any, ...]) -> tuple[float, bytes, int]:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, verbose=False, opset_version=OPSET)
    seconds = time.perf_counter() - start
    return seconds, program.model_proto.SerializeToString(), len(program.model_proto.graph.node)


def _row(
    name: str, factory: Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]], repeat: int
) -> dict[str, Any]:
    torch.manual_seed(0)
    model, args = factory()
    with torch.no_grad():
        expected = [
            t.numpy() for t in pytree.tree_leaves(model(*args)) if isinstance(t, torch.Tensor)
        ]
    inputs = [a.numpy() for a in args]
    row: dict[str, Any] = {"model": name}
    for label, exporter in (("ours", _ours), ("torch.onnx", _theirs)):
        try:
            times, proto, nodes = [], b"", 0
            for _ in range(repeat):
                seconds, proto, nodes = exporter(model, args)
                times.append(seconds)
            latency, diff = _ort_latency_and_diff(proto, inputs, expected)
            row[label] = {
                "ok": True,
                "export_s": statistics.median(times),
                "nodes": nodes,
                "ort_ms": latency,
                "diff": diff,
            }
        except Exception as e:
            row[label] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:120]}"}
    return row


def _print(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'model':18} {'ok(us/them)':12} {'export s us':>11} {'them':>7} {'ratio':>6} "
        f"{'nodes us':>8} {'them':>5} {'ORT ms us':>9} {'them':>6} {'diff us':>8} "
        f"{'them':>8}"
    )
    print(header)
    print("-" * len(header))
    ratios = []
    for row in rows:
        us, them = row["ours"], row["torch.onnx"]
        ok = f"{'y' if us['ok'] else 'n'}/{'y' if them['ok'] else 'n'}"
        if us["ok"] and them["ok"]:
            ratio = us["export_s"] / them["export_s"]
            ratios.append(ratio)
            print(
                f"{row['model']:18} {ok:12} {us['export_s']:11.3f} {them['export_s']:7.3f} "
                f"{ratio:6.2f} {us['nodes']:8d} {them['nodes']:5d} {us['ort_ms']:9.3f} "
                f"{them['ort_ms']:6.3f} {us['diff']:8.1e} {them['diff']:8.1e}"
            )
        else:
            print(
                f"{row['model']:18} {ok:12} "
                + "; ".join(
                    f"{k}: {v.get('error')}"
                    for k, v in (("ours", us), ("torch.onnx", them))
                    if not v["ok"]
                )
            )
    if ratios:
        print(
            f"\ngeometric mean export-time ratio (ours / torch.onnx): "
            f"{statistics.geometric_mean(ratios):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="exports per model and exporter")
    parser.add_argument("--models", default="", help="comma-separated subset")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset for both exporters")
    options = parser.parse_args()
    global OPSET  # noqa: PLW0603 - one setting for the whole run
    OPSET = options.opset
    factories = _small_modules() | _transformers_models()
    if options.models:
        factories = {k: v for k, v in factories.items() if k in options.models.split(",")}
    # Warm both exporters once (imports, torchlib registration) so the table compares
    # the cost of each export a user pays after the first.
    _row("warm-up", _small_modules()["mlp"], 1)
    _print([_row(name, factory, options.repeat) for name, factory in factories.items()])


if __name__ == "__main__":
    main()
