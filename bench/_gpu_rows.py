"""The rows of ``bench/gpu_check.py``'s table: exports vs eager, greedy tokens (decode rows:
``bench/_gpu_decode.py``).

Each ``check_*`` function adds its rows to the one :class:`Table`; ``device`` is ``"cuda"``
on a GPU and ``"cpu"`` under ``--dry-run`` (tiny models, the CUDA-only rows ``skipped``).
"""

from __future__ import annotations

import functools
import pathlib
import time
from collections.abc import Callable
from typing import Any

PROMPT, NEW = 32, 64

#: The ~135M Llama (SmolLM-135M's shape) and a tiny one for --dry-run.
LLAMA = {
    "full": {
        "vocab_size": 49152,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "tie_word_embeddings": True,
    },
    "tiny": {
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}


class Table:
    """Rows of the one table: check, variant, result, ours, reference, note."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: object) -> None:
        self.rows.append(tuple(str(c) for c in cells))
        print("  " + " | ".join(self.rows[-1]), flush=True)

    def markdown(self) -> str:
        head = "| check | variant | result | ours | reference | note |\n|---|---|---|---|---|---|"
        return "\n".join([head, *("| " + " | ".join(r) + " |" for r in self.rows)])


def _timed(run: Callable[[], Any], device: str) -> float:
    """Best milliseconds of ``rounds`` calls (after two warm-ups), synchronized on CUDA."""
    import torch

    best = float("inf")
    rounds = 20 if device == "cuda" else 3
    for i in range(rounds + 2):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            best = min(best, time.perf_counter() - started)
    return best * 1e3


def _models(size: str) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    width = 64 if size == "full" else 8
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1),
        torch.nn.BatchNorm2d(width),
        torch.nn.ReLU(),
        torch.nn.Conv2d(width, width, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(width, 10),
    )
    pixels = torch.randn(8 if size == "full" else 2, 3, 64 if size == "full" else 16, 16 * 4)
    hidden = 256 if size == "full" else 32
    bert = tf.BertModel(
        tf.BertConfig(
            vocab_size=1000,
            hidden_size=hidden,
            num_hidden_layers=4 if size == "full" else 1,
            num_attention_heads=4,
            intermediate_size=4 * hidden,
        )
    )
    ids = torch.randint(0, 1000, (8 if size == "full" else 2, 128 if size == "full" else 8))
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(**LLAMA[size], use_cache=False))
    tokens = torch.randint(3, int(LLAMA[size]["vocab_size"]), (1, PROMPT))
    return {
        "CNN": (cnn.eval(), (pixels,)),
        "BERT encoder": (bert.eval(), (ids,)),
        "Llama": (llama.eval(), (tokens,)),
    }


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    return _first_tensor(value[0])


def _load(path: pathlib.Path, device: str, dtype: str) -> tuple[Any, str]:
    import onnx_export
    from onnx_export.adapters import MissingKernelError

    if device == "cuda":
        module = onnx_export.load(path, providers=["cuda"])
        require_cuda(module.providers, path.name)
        return module, ""
    try:
        return onnx_export.load(path), ""
    except MissingKernelError:  # the CPU provider lacks some float16 kernels
        return onnx_export.load(path, upcast=[dtype]), f"CPU: computed in float32 (upcast {dtype})"


def require_cuda(providers: list[str], what: str) -> None:
    """Stop when ONNX Runtime fell back to the CPU (CUDA provider present but not loadable)."""
    if not providers or providers[0] != "CUDAExecutionProvider":
        raise SystemExit(
            f"error: {what} runs on {providers}, not CUDAExecutionProvider: onnxruntime-gpu "
            "could not load its CUDA provider (CUDA 13 and cuDNN 9 libraries; see the "
            "warnings above)."
        )


def check_exports(table: Table, size: str, device: str, folder: pathlib.Path) -> None:
    import torch

    import onnx_export

    tolerance = {"float32": 1e-3, "float16": 2e-2}
    for name, (model, args) in _models(size).items():
        for dtype in ("float32", "float16"):
            options = onnx_export.ExportOptions(dtype=None if dtype == "float32" else dtype)
            started = time.perf_counter()
            path = folder / f"{name.replace(' ', '_')}-{dtype}.onnx"
            with torch.no_grad():
                onnx_export.dynamo_export(model, *args, export_options=options).save(path)
            seconds = time.perf_counter() - started
            module, note = _load(path, device, dtype)
            eager = model.to(device=device, dtype=getattr(torch, dtype))
            inputs = tuple(a.to(device) for a in args)  # float32: the adapter casts
            narrowed = tuple(_narrow(a, dtype) for a in inputs)
            with torch.no_grad():
                want = _first_tensor(eager(*narrowed)).float()
                got = _first_tensor(module(*inputs)).float()
                ours = _timed(functools.partial(module, *inputs), device)
                ref = _timed(functools.partial(eager, *narrowed), device)
            error = float((got.to(want.device) - want).abs().max() / want.abs().max().clamp(1e-6))
            verdict = "ok" if error <= tolerance[dtype] else "MISMATCH"
            table.add(
                f"{name} vs eager ({device})",
                dtype,
                f"{verdict}: max error {error:.1e} of max abs eager",
                f"{ours:.2f} ms",
                f"{ref:.2f} ms",
                f"exported in {seconds:.1f} s {note}".strip(),
            )
            model.float().cpu()


def _narrow(tensor: Any, dtype: str) -> Any:
    import torch

    return tensor.to(getattr(torch, dtype)) if tensor.is_floating_point() else tensor


def _checkpoint(size: str, folder: pathlib.Path) -> Any:
    import torch
    import transformers as tf

    config = tf.LlamaConfig(
        **LLAMA[size], max_position_embeddings=256, bos_token_id=1, eos_token_id=2
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    _word_tokenizer(int(config.vocab_size)).save_pretrained(folder)  # genai's builder wants one
    return model


def _word_tokenizer(vocab_size: int) -> Any:
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tf.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def export_llama_folders(
    size: str, device: str, root: pathlib.Path, table: Table
) -> tuple[Any, dict[str, pathlib.Path]]:
    from onnx_export import hf

    ckpt = root / "ckpt"
    model = _checkpoint(size, ckpt)
    folders = {}
    for label, quantize in (("ours fp16", None), ("ours fp16 + int4", "int4")):
        started = time.perf_counter()
        folders[label] = root / label.replace(" ", "_").replace("+", "")
        hf.export_pretrained(
            ckpt, folders[label], dtype="float16", target="onnxruntime", quantize=quantize
        )
        seconds = time.perf_counter() - started
        table.add("onnx-export hf --dtype float16", label, "exported", "", "", f"{seconds:.0f} s")
    return model, folders


def check_greedy(model: Any, folder: pathlib.Path, device: str, table: Table) -> None:
    import numpy as np
    import torch

    from onnx_export import hf

    ours = hf.OrtModelForCausalLM.from_pretrained(folder, providers=[device])
    reference = model.to(device=device, dtype=torch.float16)
    ids = torch.randint(3, model.config.vocab_size, (2, PROMPT), generator=_seeded(1))
    with torch.no_grad():
        want = reference.generate(
            ids.to(device), max_new_tokens=NEW, do_sample=False, eos_token_id=None
        )
    got = np.asarray(ours.generate(ids.numpy(), max_new_tokens=NEW, eos_token_id=[]))
    want_np = want.cpu().numpy()
    same = got.shape == want_np.shape and bool(np.array_equal(got, want_np))
    verdict, where = "equal", ""
    if not same:
        row, step, margin = _first_difference(got, want_np, reference, device)
        tie = margin is not None and margin <= _TIE
        verdict = "equal up to a float16 tie" if tie else "DIFFERENT"
        where = f"row {row} differs first at new token {step}; " + (
            f"transformers' logit margin there {margin:.2g} of max abs logit (tie: <= {_TIE})"
            if margin is not None
            else "shapes differ"
        )
    table.add(
        f"greedy tokens vs transformers ({device}, float16)",
        f"batch 2, {PROMPT} + {NEW}",
        verdict,
        f"providers {ours.session.session.get_providers()[0] if hasattr(ours, 'session') else ''}",
        "transformers generate",
        where or "float16 ties may flip a token: the position is printed when they do",
    )
    model.float().cpu()


def _seeded(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


#: Two logits within this fraction of the largest one are a float16 tie: 4 units in the
#: last place of float16 (2**-10), where the two computations round at different points.
_TIE = 4 * 2**-10


def _first_difference(
    got: Any, want: Any, reference: Any, device: str
) -> tuple[int, int, float | None]:
    """The first differing (row, new token), and transformers' margin there between its
    token and ours, as a fraction of the largest logit (``None`` when shapes differ)."""
    import numpy as np
    import torch

    if got.shape != want.shape:
        return -1, -1, None
    rows, columns = np.nonzero(got != want)
    first = int(np.argmin(columns))
    row, column = int(rows[first]), int(columns[first])
    prefix = torch.from_numpy(want[row : row + 1, :column]).to(device)
    with torch.no_grad():
        logits = reference(prefix).logits[0, -1].float()
    margin = float(logits[int(want[row, column])] - logits[int(got[row, column])])
    return row, column - PROMPT, margin / float(logits.abs().max())
