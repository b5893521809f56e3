"""How much of a decode step is Python around ``session.run``, in ``OrtModelForCausalLM``.

Exports a ~5M-parameter random Llama (bench_generate.py's ``llama-5M``), greedy-generates
64 tokens after a 32-token prompt with one intra-op thread, and splits the time into the
part inside ONNX Runtime (``run_with_iobinding``) and the rest (binding, numpy, the loop).
Prints CPU milliseconds a step (this thread's: ORT computes on it with one intra-op thread,
and other processes on a loaded machine do not count) and the loop's share; best of several
runs. ``--target onnxruntime`` measures the fused decoder (GroupQueryAttention), whose
greedy loop runs on one shared past/present buffer. Run it from the repository root:
``python bench/bench_generate_overhead.py [--batch 2] [--target onnxruntime]``.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time
from typing import Any

import numpy as np
import onnxruntime as ort

PROMPT, NEW = 32, 64
CONFIG = {
    "vocab_size": 4000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "eos_token_id": None,
    "pad_token_id": 0,
}


#: This thread's CPU seconds: with one intra-op thread ORT computes on the calling thread,
#: and CPU time does not count the time the shared machine gives to other processes.
_clock = time.thread_time


def _export(folder: pathlib.Path, target: str) -> pathlib.Path:
    import torch
    import transformers as tf

    from onnx_export import hf

    torch.manual_seed(0)
    tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)).eval().save_pretrained(folder / "ckpt")
    fused = target == "onnxruntime"
    hf.export_pretrained(
        folder / "ckpt", folder / "onnx", target="onnxruntime" if fused else "onnx"
    )
    return folder / "onnx"


class _Timer:
    """Stands in for the session's C session and adds up the seconds inside its runs."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.inside = 0.0
        self.calls = 0
        self._inner = session._sess
        session._sess = self  # type: ignore[assignment]
        for name in ("run_with_iobinding", "run"):  # the Python wrapper's own methods too
            if name in vars(type(session)):
                setattr(session, name, self._wrap(getattr(session, name)))

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        return self._wrap(attribute) if name.startswith("run") else attribute

    def _wrap(self, original: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = _clock()
            try:
                return original(*args, **kwargs)
            finally:
                self.inside += _clock() - start
                self.calls += 1

        return timed


def measure(folder: pathlib.Path, batch: int, repeat: int) -> tuple[float, float, float]:
    """Best total seconds, seconds inside ORT, and the steps of one generate()."""
    from onnx_export import hf

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    model = hf.OrtModelForCausalLM.from_pretrained(folder, session_options=options)
    timer = _Timer(model.session.session)
    ids = np.random.default_rng(0).integers(2, CONFIG["vocab_size"], (batch, PROMPT))
    model.generate(ids, max_new_tokens=4)
    best = (float("inf"), 0.0, 0.0)
    for _ in range(repeat):
        timer.inside, timer.calls = 0.0, 0
        start = _clock()
        model.generate(ids, max_new_tokens=NEW)
        total = _clock() - start
        if total < best[0]:
            best = (total, timer.inside, float(timer.calls))
    return best


def main() -> None:
    """Print the per-step split."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--folder", type=pathlib.Path, default=None, help="reuse an export")
    parser.add_argument("--target", default="onnx", choices=["onnx", "onnxruntime"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or _export(pathlib.Path(tmp), args.target)
        total, inside, calls = measure(folder, args.batch, args.repeat)
    outside = total - inside
    print(
        f"llama-5M ({args.target} target) batch {args.batch}, {NEW} new tokens, 1 thread, "
        f"{int(calls)} runs"
    )
    print(f"  step: {1e3 * total / calls:.3f} ms; inside ORT {1e3 * inside / calls:.3f} ms; ")
    print(f"  Python around it: {1e3 * outside / calls:.3f} ms = {100 * outside / total:.1f}%")


if __name__ == "__main__":
    main()
