"""The built-in demo's model and steps: export, save, run in ONNX Runtime, compare (needs torch)."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["DemoModel", "run_demo"]


class DemoModel(torch.nn.Module):
    """A small causal self-attention block with a classifier head."""

    def __init__(self, vocab: int = 50, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.head = torch.nn.Linear(width, 2)

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return per-token hidden states and per-sequence logits."""
        x = self.norm(self.embed(input_ids))
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        hidden = x + self.out(attn.transpose(1, 2).reshape(batch, seq, width))
        return {"hidden": hidden, "logits": self.head(F.gelu(hidden.mean(dim=1)))}


def run_demo(
    output: pathlib.Path, echo: Callable[[str], None] = print, *, verbose: bool = False
) -> int:
    """Export the demo model to ``output``, check it in ONNX Runtime; 0 when it matches.

    Writes ``output`` and the SARIF report beside it (``output`` with suffix ``.sarif``).
    """
    from onnx_export import ExportOptions
    from onnx_export.cli._common import CommandError
    from onnx_export.cli._factory import ModelCall
    from onnx_export.cli.export import export_quietly
    from onnx_export.diagnostics import DiagnosticOptions, Level, summarize

    torch.manual_seed(0)
    model = DemoModel().eval()
    example = torch.randint(0, 50, (2, 8))
    options = ExportOptions(
        dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"}},
        diagnostic_options=DiagnosticOptions(verbosity=Level.NOTE),
    )
    start = time.perf_counter()
    program = export_quietly(ModelCall(model, (example,), {}), options, verbose=verbose)
    seconds = time.perf_counter() - start
    graph = program.model.graph
    echo(
        f"Exported {type(model).__name__} in {seconds:.2f} s: {graph.num_nodes()} ONNX nodes, "
        f"opset {graph.opset_imports['']}, inputs {[f'{v.name}{v.shape}' for v in graph.inputs]}"
    )
    path = program.save(output)
    echo(f"Saved the model {path} ({path.stat().st_size / 1024:.1f} KiB)")
    worst = 0.0
    for batch, seq in ((2, 8), (3, 5), (1, 13)):
        ids = torch.randint(0, 50, (batch, seq))
        with torch.no_grad():
            expected = model(ids)
        got = program(ids)  # a dict with the model's own keys, through the saved adapter
        diffs = [float((expected[key] - got[key]).abs().max()) for key in ("hidden", "logits")]
        worst = max(worst, *diffs)
        echo(
            f"ONNX Runtime vs PyTorch at batch={batch}, sequence={seq}: max abs diff "
            f"{max(diffs):.2e}"
        )
    verdict = program.verify(example)
    report = program.save_diagnostics(output.with_suffix(".sarif"))
    counts = summarize(program.diagnostic_context.to_sarif()).splitlines()[-1]
    echo(
        f"Wrote the SARIF diagnostics report {report} ({counts}); read it with "
        f"`onnx-export diagnostics {report.name}` or a SARIF viewer."
    )
    if worst >= 1e-4 or not verdict.ok:
        echo(f"Result: MISMATCH (max diff {worst:.2e}).")
        raise CommandError(f"the demo's ONNX outputs differ from PyTorch's (max diff {worst:.2e}).")
    echo("Result: outputs match PyTorch.")
    return 0
