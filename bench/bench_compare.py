"""Graph quality side by side: our exporter and torch.onnx.export(dynamo=True), one run.

Per model (BERT, GPT-2, Llama, BART, ViT, Whisper encoder, LSTM, a BatchNorm CNN, ResNet,
ConvNeXt from ``tests/e2e/zoo_models.py``, a few ``torch.nn`` models and the vision
stand-ins of ``bench/vision_standins.py``, ``vision/...``: the patterns of the timm and
torchvision outliers of #22; ``timm`` classification models too when ``timm`` is
installed) it prints: export time (median of ``--repeat``), node count, file size, ONNX
Runtime latency (the two models' sessions called in alternation, median, one thread) and
the largest absolute difference from eager PyTorch; then the geometric means of ours /
torch.onnx and the worst models by export time and node ratio, naming every model slower
than torch.onnx or with more than 1.02x its nodes. Each exporter uses its own defaults
(opset, optimizer). ``--targets default,onnxruntime`` adds our
``ExportOptions(target="onnxruntime")`` as a third column. ``--histogram`` prints, per
model, the op types whose counts differ (ours - torch.onnx).

    python bench/bench_compare.py [--models bert,cnn] [--histogram] [--repeat 3]
    python bench/bench_compare.py --fresh-process   # first export of the demo, import included
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import io
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn
from torch.utils import _pytree as pytree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.zoo_models import ZOO  # noqa: E402

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
Factory = Callable[[], tuple[nn.Module, Inputs]]

ZOO_MODELS = ["bert", "gpt2", "llama", "bart", "vit", "whisper_encoder", "lstm", "resnet"]
ZOO_MODELS += ["convnext", "t5", "transformer_encoder"]


class _CNN(nn.Module):
    """Conv + BatchNorm blocks, GELU, AvgPool without padding counted, a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.GELU(),
            nn.AvgPool2d(3, 1, 1, count_include_pad=False),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class _MLP3d(nn.Module):
    """``Linear`` layers on a 3-D input with GELU and a BatchNorm1d head."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)
        self.norm = nn.BatchNorm1d(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc2(nn.functional.gelu(self.fc1(x)))
        return self.norm(hidden.mean(dim=1))


def _seeded(make: Callable[[], nn.Module], inputs: Callable[[], Inputs]) -> Factory:
    def factory() -> tuple[nn.Module, Inputs]:
        torch.manual_seed(0)
        model = make().eval()
        with torch.no_grad():  # non-trivial running statistics for BatchNorm
            for module in model.modules():
                if isinstance(module, nn.modules.batchnorm._BatchNorm):
                    module.running_mean.uniform_(-0.5, 0.5)
                    module.running_var.uniform_(0.5, 2.0)
        return model, inputs()

    return factory


def _zoo(name: str) -> Factory:
    entry = ZOO[name]
    return _seeded(entry.build, lambda: entry.inputs(*entry.size))


def _timm(name: str) -> Factory:
    def make() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=10)  # type: ignore[no-any-return]

    return _seeded(make, lambda: ((torch.randn(1, 3, 64, 64),), {}))


TIMM_MODELS = ["resnet18", "mobilenetv3_small_050", "poolformer_s12", "efficientformer_l1"]
TIMM_MODELS += ["convnext_atto", "vit_tiny_patch16_224", "densenet121"]


def _standin(name: str) -> Factory:
    def factory() -> tuple[nn.Module, Inputs]:
        import vision_standins

        return vision_standins.build(name)

    return factory


def factories(with_timm: bool) -> dict[str, Factory]:
    """Every model of the benchmark, by name."""
    found: dict[str, Factory] = {name: _zoo(name) for name in ZOO_MODELS}
    sys.path.insert(0, str(ROOT / "bench"))
    import vision_standins

    found |= {f"vision/{name}": _standin(name) for name in vision_standins.STANDINS}
    found["cnn"] = _seeded(_CNN, lambda: ((torch.randn(2, 3, 16, 16),), {}))
    found["mlp3d"] = _seeded(_MLP3d, lambda: ((torch.randn(4, 10, 32),), {}))
    if with_timm:
        try:
            import timm  # noqa: F401
        except Exception as e:  # timm needs torchvision for parts; keep it optional
            print(f"# timm models skipped: {type(e).__name__}: {e}")
        else:
            found |= {f"timm/{name}": _timm(name) for name in TIMM_MODELS}
    return found


# -- exporting ------------------------------------------------------------------------------


def _export_ours(target: str) -> Callable[[nn.Module, Inputs], onnx.ModelProto]:
    def export(model: nn.Module, inputs: Inputs) -> onnx.ModelProto:
        import onnx_export

        options = (
            onnx_export.ExportOptions(target=target)  # type: ignore[call-arg]
            if target != "default"
            else onnx_export.ExportOptions()
        )
        program = onnx_export.dynamo_export(model, *inputs[0], export_options=options, **inputs[1])
        return program.model_proto

    return export


def _export_theirs(model: nn.Module, inputs: Inputs) -> onnx.ModelProto:
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, inputs[0], kwargs=inputs[1], dynamo=True, verbose=False)
    assert program is not None
    return program.model_proto


def _flat(inputs: Inputs) -> list[np.ndarray]:
    return [
        leaf.detach().numpy()
        for leaf in pytree.tree_leaves(inputs)
        if isinstance(leaf, torch.Tensor)
    ]


def _session(proto: onnx.ModelProto, folder: Path, label: str) -> tuple[Any, int]:
    path = folder / f"{label}.onnx"
    onnx.save(proto, str(path))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session, path.stat().st_size


def _feed(session: Any, arrays: list[np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    wanted = [i.name for i in session.get_inputs()]
    by_name = dict(zip(names, arrays, strict=False))
    if all(n in by_name for n in wanted):
        return {n: by_name[n] for n in wanted}
    return dict(zip(wanted, arrays, strict=False))


def _diff(expected: list[np.ndarray], got: list[np.ndarray]) -> float:
    if len(got) < len(expected):
        return math.inf
    worst = 0.0
    for want, have in zip(expected, got, strict=False):
        if want.shape != have.shape:
            return math.inf
        if want.size:
            worst = max(worst, float(np.abs(want.astype(np.float64) - have).max()))
    return worst


def _histogram(proto: onnx.ModelProto) -> collections.Counter[str]:
    return collections.Counter(
        (f"{n.domain}::" if n.domain not in ("", "ai.onnx") else "") + n.op_type
        for n in proto.graph.node
    )


def _row(name: str, factory: Factory, exporters: dict[str, Any], repeat: int) -> dict[str, Any]:
    model, inputs = factory()
    with torch.no_grad():
        eager = model(*copy.deepcopy(inputs[0]), **copy.deepcopy(inputs[1]))
    expected = [
        t.detach().numpy() for t in pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)
    ]
    arrays = _flat(inputs)
    names = [*[f"arg{i}" for i in range(len(inputs[0]))], *inputs[1]]
    row: dict[str, Any] = {"model": name}
    sessions: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for label, export in exporters.items():
            try:
                times, proto = [], None
                for _ in range(repeat):
                    start = time.perf_counter()
                    with torch.no_grad():
                        proto = export(copy.deepcopy(model), copy.deepcopy(inputs))
                    times.append(time.perf_counter() - start)
                assert proto is not None
                session, size = _session(proto, Path(folder), label.replace(".", "_"))
                feed = _feed(session, arrays, names)
                row[label] = {
                    "ok": True,
                    "export_s": statistics.median(times),
                    "nodes": len(proto.graph.node),
                    "bytes": size,
                    "diff": _diff(expected, session.run(None, feed)),
                    "histogram": _histogram(proto),
                }
                sessions[label] = (session, feed)
            except Exception as e:
                text = (str(e).strip().splitlines() or [""])[0]
                row[label] = {"ok": False, "error": f"{type(e).__name__}: {text[:150]}"}
        for label, latency in _latencies(sessions).items():
            row[label]["ort_ms"] = latency
    return row


def _latencies(sessions: dict[str, Any], rounds: int = 300) -> dict[str, float]:
    """Median call time of each session, called in alternation so load changes hit all."""
    times: dict[str, list[float]] = {label: [] for label in sessions}
    deadline = time.perf_counter() + 15.0
    for i in range(rounds):
        for label, (session, feed) in sessions.items():
            start = time.perf_counter()
            session.run(None, feed)
            if i:  # the first call of each warms up
                times[label].append(time.perf_counter() - start)
        if time.perf_counter() > deadline and i >= 5:
            break
    return {label: statistics.median(t) * 1e3 for label, t in times.items() if t}


# -- printing -------------------------------------------------------------------------------


def _cell(result: dict[str, Any]) -> str:
    if not result["ok"]:
        return f"{'FAIL':>44s}"
    return (
        f"{result['export_s']:6.2f}s {result['nodes']:5d} {result['bytes'] / 1024:7.0f}K "
        f"{result.get('ort_ms', math.nan):7.3f}ms {result['diff']:8.1e}"
    )


def print_table(rows: list[dict[str, Any]], labels: list[str]) -> None:
    """The per-model table and the geometric means of each column against torch.onnx."""
    head = f"{'model':26s}" + "".join(f" | {label:^44s}" for label in labels)
    print(head)
    print(f"{'':26s}" + " | export    nodes    size   latency     diff" * len(labels))
    print("-" * len(head))
    ratios: dict[str, dict[str, list[float]]] = {
        label: collections.defaultdict(list) for label in labels[1:]
    }
    for row in rows:
        print(f"{row['model']:26s}" + "".join(f" | {_cell(row[label])}" for label in labels))
        base = row[labels[0]]
        for label in labels[1:]:
            ours = row[label]
            if not (ours["ok"] and base["ok"]):
                for other in (ours, base):
                    if not other["ok"]:
                        print(f"    {label if other is ours else labels[0]}: {other['error']}")
                continue
            for key in ("export_s", "nodes", "bytes", "ort_ms"):
                if key in ours and key in base and base[key]:
                    ratios[label][key].append(ours[key] / base[key])
    for label, by_key in ratios.items():
        parts = [
            f"{key} {statistics.geometric_mean(v):.2f}x (max {max(v):.2f}x)"
            for key, v in by_key.items()
            if v
        ]
        print(f"\n{label} / {labels[0]} geomean: " + ", ".join(parts))
        print_worst(rows, label, labels[0])


#: Where a model stops being as good as torch.onnx: export time above this ratio is
#: slower, a node count above this one is a larger graph (issue #22's bars).
_SLOWER, _LARGER = 1.0, 1.02


def print_worst(rows: list[dict[str, Any]], ours: str, theirs: str, count: int = 5) -> None:
    """The models with the worst export-time and node ratios, and those past the bars."""
    both = [r for r in rows if r[ours]["ok"] and r[theirs]["ok"]]
    for key, bar, what in (("export_s", _SLOWER, "slower"), ("nodes", _LARGER, "larger")):
        by_model = {r["model"]: r[ours][key] / r[theirs][key] for r in both if r[theirs][key]}
        worst = sorted(by_model, key=by_model.__getitem__, reverse=True)[:count]
        past = [m for m in worst if by_model[m] > bar]
        text = ", ".join(f"{m} {by_model[m]:.2f}x" for m in worst)
        print(f"  worst {key} ratios: {text}")
        print(f"  {what} than {theirs} (> {bar:.2f}x): {', '.join(past) if past else 'none'}")
    failed = [r["model"] for r in rows if not r[ours]["ok"]]
    if failed:
        print(f"  {ours} failed: {', '.join(failed)}")


def print_histograms(rows: list[dict[str, Any]], ours: str, theirs: str) -> None:
    """Op types whose counts differ, per model: ``+n`` where ours has more."""
    total: collections.Counter[str] = collections.Counter()
    for row in rows:
        if not (row[ours]["ok"] and row[theirs]["ok"]):
            continue
        diff = collections.Counter(row[ours]["histogram"])
        diff.subtract(row[theirs]["histogram"])
        changed = {op: n for op, n in diff.items() if n}
        total.update(changed)
        text = ", ".join(f"{op} {n:+d}" for op, n in sorted(changed.items(), key=lambda x: -x[1]))
        print(f"{row['model']:26s} {text or 'same'}")
    text = ", ".join(f"{op} {n:+d}" for op, n in sorted(total.items(), key=lambda x: -x[1]) if n)
    print(f"{'all models':26s} {text}")


def _decode_factory(past: int = 512) -> Factory:
    """A Llama-style decoder (grouped-query attention) taking one token after ``past``."""

    def factory() -> tuple[nn.Module, Inputs]:
        import transformers

        from tests.e2e.zoo_models import CachedDecoder

        torch.manual_seed(0)
        layers, kv_heads, head_dim = 4, 2, 32
        config = transformers.LlamaConfig(
            vocab_size=1000,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=layers,
            num_attention_heads=8,
            num_key_value_heads=kv_heads,
            max_position_embeddings=2 * past,
        )
        model = CachedDecoder(transformers.LlamaForCausalLM(config)).eval()
        ids = torch.randint(0, 1000, (1, 1))
        mask = torch.ones(1, past + 1, dtype=torch.long)
        keys = [torch.randn(1, kv_heads, past, head_dim) for _ in range(layers)]
        values = [torch.randn(1, kv_heads, past, head_dim) for _ in range(layers)]
        return model, ((ids, mask, keys, values), {})

    return factory


def fresh_process() -> None:
    """Wall time of ``import onnx_export`` + the demo model's export in a new interpreter."""
    code = (
        "import time; t=time.perf_counter(); import torch; t1=time.perf_counter(); "
        "import onnx_export; from onnx_export.cli._demo_model import DemoModel; "
        "m=DemoModel().eval(); x=torch.randint(0,50,(2,8)); "
        "onnx_export.dynamo_export(m, x); t2=time.perf_counter(); "
        "print(f'{t1-t:.2f} {t2-t1:.2f}')"
    )
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        print(f"fresh process: import torch {out[0]} s, import + first demo export {out[1]} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--targets", default="default", help="ours: default,onnxruntime")
    parser.add_argument("--repeat", type=int, default=1, help="exports per model and exporter")
    parser.add_argument("--histogram", action="store_true", help="op histogram differences")
    parser.add_argument("--timm", action="store_true", help="add timm models (if installed)")
    parser.add_argument("--fresh-process", action="store_true", help="time a first export")
    parser.add_argument(
        "--decode", action="store_true", help="add a Llama decode step (1 token, 512 past)"
    )
    args = parser.parse_args()
    if args.fresh_process:
        fresh_process()
        return
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    found = factories(args.timm)
    if args.decode:
        found["llama_decode_512"] = _decode_factory()
    names = args.models.split(",") if args.models else list(found)
    exporters: dict[str, Any] = {"torch.onnx": _export_theirs}
    for target in args.targets.split(","):
        exporters["ours" if target == "default" else f"ours:{target}"] = _export_ours(target)
    for warm in ("cnn", "bert"):  # imports, registries, transformers: for both exporters
        _row("warm-up", found[warm], exporters, 1)
    rows = []
    for name in names:
        rows.append(_row(name, found[name], exporters, args.repeat))
        print(f"# {name} done", file=sys.stderr, flush=True)
    labels = list(exporters)
    print_table(rows, labels)
    if args.histogram:
        print("\nop histogram, ours - torch.onnx:")
        print_histograms(rows, labels[1], labels[0])


if __name__ == "__main__":
    main()
