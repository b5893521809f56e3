"""The GPU check of issue #29: half precision and CUDA end to end, one command, one table.

On one GPU (under 8 minutes on an H200) it runs, and prints as one Markdown table:

1. A CNN, a BERT-style encoder and a ~135M Llama (SmolLM-135M's shape, random weights)
   exported with ``dynamo_export`` in float32 and in float16 (``ExportOptions(dtype=...)``),
   each loaded with ``onnx_export.load(path, providers=["cuda"])`` and called with torch
   CUDA tensors (IO binding, no host copy), compared with eager PyTorch on CUDA in the same
   dtype; milliseconds per call of both.
2. The HF runtime: ``onnx-export hf --dtype float16 --target onnxruntime`` of the Llama,
   ``OrtModelForCausalLM`` on CUDA, greedy tokens against transformers' ``generate`` on
   CUDA in float16 (equal, or the first differing position where two logits tie within
   float16's rounding).
3. Decode tokens/s, batch 1 and batch 8, 32-token prompt + 64 new tokens, greedy: ours
   (fp16, fp16 + int4), onnxruntime-genai-cuda's own builder at the same precisions
   (``-p fp16|int4 -e cuda``) and eager transformers on CUDA in float16.

It installs ``onnxruntime-gpu`` and ``onnxruntime-genai-cuda`` itself, into a folder of its
own put first on ``PYTHONPATH`` (the CPU ``onnxruntime`` left installed): from PyPI, or with
``--wheels DIR`` from wheel files there without the network (``pip --no-index``); a wheel
split into ``NAME.whl.part-*`` pieces (to travel in pieces of a size limit) is joined first.
Then it runs itself again with that folder on the path.

``--dry-run`` does the same on the CPU with tiny models and nothing installed: exports in
both precisions, checks against eager (float16 where the CPU provider has kernels, else the
float32 upcast), greedy tokens, the table; the CUDA and genai rows say ``skipped``. CI runs
it (tests/test_gpu_check.py).

    python bench/gpu_check.py [--dry-run] [--wheels DIR] [--site DIR] [--out table.md]
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU_PACKAGES = ("onnxruntime-gpu", "onnxruntime-genai-cuda")
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


# ---- installing the GPU packages (before onnxruntime is imported) --------------------------


def _cuda_runtime_ready() -> bool:
    probe = (
        "import onnxruntime as o, onnxruntime_genai;"
        "import sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False)
    return done.returncode == 0


def wheel_files(folder: pathlib.Path, scratch: pathlib.Path) -> list[pathlib.Path]:
    """The wheels in ``folder``, with ``NAME.whl.part-*`` pieces joined into ``scratch``."""
    wheels = sorted(folder.glob("*.whl"))
    pieces: dict[str, list[pathlib.Path]] = {}
    for piece in sorted(folder.glob("*.whl.part-*")):
        pieces.setdefault(piece.name.split(".part-")[0], []).append(piece)
    for name, parts in pieces.items():
        joined = scratch / name
        with joined.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        wheels.append(joined)
    if not wheels:
        raise SystemExit(f"error: no *.whl (or *.whl.part-*) files in {folder}")
    return wheels


def install_and_rerun(args: argparse.Namespace, argv: list[str]) -> None:
    """Install the GPU packages into ``args.site`` unless they work already; run again."""
    if _cuda_runtime_ready():
        return
    site = pathlib.Path(args.site)
    site.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--no-deps"]
    command += ["--no-compile", "--target", str(site)]
    if args.wheels:
        scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpu_check_wheels-"))
        files = wheel_files(pathlib.Path(args.wheels), scratch)
        command += ["--no-index", *map(str, files)]
    else:
        command += list(GPU_PACKAGES)
    print("installing:", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    os.execve(sys.executable, [sys.executable, __file__, *argv, "--no-install"], env)


# ---- the checks -------------------------------------------------------------------------


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
        _require_cuda(module.providers, path.name)
        return module, ""
    try:
        return onnx_export.load(path), ""
    except MissingKernelError:  # the CPU provider lacks some float16 kernels
        return onnx_export.load(path, upcast=[dtype]), f"CPU: computed in float32 (upcast {dtype})"


def _require_cuda(providers: list[str], what: str) -> None:
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


def build_genai(ckpt: pathlib.Path, out: pathlib.Path, precision: str) -> None:
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt)]
    command += ["-o", str(out), "-p", precision, "-e", "cuda", "-c", str(out.parent / "cache")]
    subprocess.run(command, check=True, capture_output=True)


def _ours_runner(folder: pathlib.Path, device: str) -> Callable[[Any], Any]:
    from onnx_export import hf

    model = hf.OrtModelForCausalLM.from_pretrained(folder, providers=[device])
    if device == "cuda":
        _require_cuda(model.session.session.get_providers(), folder.name)
    return lambda ids: model.generate(ids, max_new_tokens=NEW, eos_token_id=[])


def _genai_runner(folder: pathlib.Path) -> Callable[[Any], Any]:
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(str(folder))

    def run(ids: Any) -> Any:
        params = og.GeneratorParams(model)
        length = PROMPT + NEW
        params.set_search_options(max_length=length, min_length=length, do_sample=False)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        while not generator.is_done():
            generator.generate_next_token()
        return np.stack([np.asarray(generator.get_sequence(i)) for i in range(len(ids))])

    return run


def _eager_runner(model: Any, device: str) -> Callable[[Any], Any]:
    import torch

    reference = model.to(device=device, dtype=torch.float16)

    def run(ids: Any) -> Any:
        with torch.no_grad():
            return reference.generate(
                torch.from_numpy(ids).to(device),
                max_new_tokens=NEW,
                min_new_tokens=NEW,
                do_sample=False,
                pad_token_id=0,
            )

    return run


def check_decode_speed(
    model: Any, folders: dict[str, pathlib.Path], root: pathlib.Path, device: str, table: Table
) -> None:
    import numpy as np

    runners = {label: _ours_runner(folder, device) for label, folder in folders.items()}
    if device == "cuda":
        for precision in ("fp16", "int4"):
            out = root / f"genai_{precision}"
            try:
                build_genai(root / "ckpt", out, precision)
                runners[f"genai-cuda {precision}"] = _genai_runner(out)
            except (subprocess.CalledProcessError, ImportError, OSError) as e:
                detail = getattr(e, "stderr", b"") or str(e).encode()
                table.add("decode", f"genai-cuda {precision}", "FAILED to build", "", "",
                          detail.decode(errors="replace").strip().splitlines()[-1:])  # fmt: skip
        runners["eager transformers fp16"] = _eager_runner(model, device)
    else:
        table.add("decode", "genai-cuda fp16/int4, eager CUDA", "skipped (no CUDA)", "", "", "")
    for batch in (1, 8):
        ids = np.random.default_rng(batch).integers(3, model.config.vocab_size, (batch, PROMPT))
        best: dict[str, float] = {}
        for _ in range(3):  # alternate the tools, best round of each
            for label, run in runners.items():
                started = time.perf_counter()
                run(ids)
                best[label] = min(best.get(label, 1e9), time.perf_counter() - started)
        for label in runners:
            rival = {"ours fp16": "genai-cuda fp16", "ours fp16 + int4": "genai-cuda int4"}
            speed = batch * NEW / best[label]
            versus = rival.get(label)
            ratio = f"{best[versus] / best[label]:.2f}x genai" if versus in best else ""
            table.add(
                f"decode tokens/s ({device})",
                f"{label}, batch {batch}",
                f"{speed:.0f} tokens/s",
                ratio,
                "",
                f"{PROMPT}-token prompt + {NEW} new, greedy, best of 3",
            )


def run_checks(args: argparse.Namespace) -> Table:
    import torch

    device = "cpu" if args.dry_run else "cuda"
    size = "tiny" if args.dry_run else "full"
    if device == "cuda":
        import onnxruntime as ort

        if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from torch's nvidia-* packages
            ort.preload_dlls()
        if not torch.cuda.is_available() or "CUDAExecutionProvider" not in (
            ort.get_available_providers()
        ):
            raise SystemExit(
                f"error: CUDA is not usable here (torch.cuda: {torch.cuda.is_available()}, "
                f"onnxruntime {ort.__version__} providers: {ort.get_available_providers()}). "
                "Run with --dry-run on a machine without a GPU."
            )
    table = Table()
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpu_check-"))
    try:
        check_exports(table, size, device, scratch)
        model, folders = export_llama_folders(size, device, scratch / "llama", table)
        check_greedy(model, folders["ours fp16"], device, table)
        check_decode_speed(model, folders, scratch / "llama", device, table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return table


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models, no install")
    parser.add_argument("--wheels", default=None, help="install the GPU packages from here")
    parser.add_argument("--site", default="/tmp/gpu_check_site", help="where to install them")
    parser.add_argument("--no-install", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    if not args.dry_run and not args.no_install:
        install_and_rerun(args, argv)
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    table = run_checks(args)
    text = table.markdown()
    print(f"\n{text}\n\n(all checks in {time.perf_counter() - started:.0f} s)")
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
