"""The decode rows of ``bench/gpu_check.py``'s table: CUDA graphs and tokens per second.

``check_cuda_graph`` compares ``cuda_graph=True``'s tokens with the usual loop's;
``check_decode_speed`` times ours (fp16, fp16 with CUDA graphs, fp16 + int4),
onnxruntime-genai-cuda's builder and eager transformers, in alternating rounds.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _gpu_rows import NEW, PROMPT, Table, require_cuda


def build_genai(ckpt: pathlib.Path, out: pathlib.Path, precision: str) -> None:
    command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt)]
    command += ["-o", str(out), "-p", precision, "-e", "cuda", "-c", str(out.parent / "cache")]
    subprocess.run(command, check=True, capture_output=True)


def _ours_runner(
    folder: pathlib.Path, device: str, cuda_graph: bool = False
) -> Callable[[Any], Any]:
    from onnx_export import hf

    model = hf.OrtModelForCausalLM.from_pretrained(
        folder, providers=[device], cuda_graph=cuda_graph
    )
    if device == "cuda":
        require_cuda(model.session.session.get_providers(), folder.name)
    return lambda ids: model.generate(ids, max_new_tokens=NEW, eos_token_id=[])


def _failure(error: BaseException) -> str:
    """An error's last line, for a FAILED row (no pipes: they would split the cell)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return f"{type(error).__name__}: {lines[-1][:300]}".replace("|", "/")


def check_cuda_graph(model: Any, folder: pathlib.Path, device: str, table: Table) -> None:
    """``cuda_graph=True``'s tokens against the usual loop's (recorded and replayed on CUDA).

    On the CPU the option is refused (``CudaGraphError``); the loop it runs, every step's
    inputs and outputs at fixed addresses, is checked there without recording.
    """
    import numpy as np

    from onnx_export import hf

    ids = np.random.default_rng(2).integers(3, model.config.vocab_size, (2, PROMPT))
    usual = hf.OrtModelForCausalLM.from_pretrained(folder, providers=[device])
    want = usual.generate(ids, max_new_tokens=NEW, eos_token_id=[])
    check = f"cuda_graph=True tokens vs without ({device})"
    variant = f"batch 2, {PROMPT} + {NEW}"
    try:
        graphed = hf.OrtModelForCausalLM.from_pretrained(
            folder, providers=[device], cuda_graph=True
        )
        note = "decode steps recorded once, replayed"
    except hf.CudaGraphError as error:
        if device == "cuda":
            table.add(check, variant, f"FAILED: {_failure(error)}", "", "", "")
            return
        graphed = hf.OrtModelForCausalLM.from_pretrained(folder, providers=[device])
        graphed.session.cuda_graph = True  # the fixed-address loop, nothing recorded
        note = "CPU: refused (CudaGraphError); the fixed-address loop checked unrecorded"
    try:
        got = graphed.generate(ids, max_new_tokens=NEW, eos_token_id=[])
    except Exception as error:  # ORT's capture refusals have no common class
        table.add(check, variant, f"FAILED: {_failure(error)}", "", "", note)
        return
    same = got.shape == want.shape and bool(np.array_equal(got, want))
    where = "" if same else f"; first difference at new token {_first_column(got, want)}"
    table.add(check, variant, "equal" if same else "DIFFERENT", "", "", note + where)


def _first_column(got: Any, want: Any) -> int:
    import numpy as np

    if got.shape != want.shape:
        return -1
    return int(np.nonzero((got != want).any(axis=0))[0][0]) - PROMPT


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
        try:
            runners["ours fp16 + CUDA graph"] = _ours_runner(folders["ours fp16"], device, True)
            runners["ours fp16 + CUDA graph"](np.full((1, PROMPT), 3))  # records; fails early
        except Exception as error:  # CudaGraphError, or ORT refusing the capture
            runners.pop("ours fp16 + CUDA graph", None)
            table.add("decode", "ours fp16 + CUDA graph", f"FAILED: {_failure(error)}", "", "", "")
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
        skipped = "genai-cuda fp16/int4, eager CUDA, ours fp16 + CUDA graph"
        table.add("decode", skipped, "skipped (no CUDA)", "", "", "")
    for batch in (1, 8):
        ids = np.random.default_rng(batch).integers(3, model.config.vocab_size, (batch, PROMPT))
        best: dict[str, float] = {}
        for _ in range(3):  # alternate the tools, best round of each
            for label, run in runners.items():
                started = time.perf_counter()
                run(ids)
                best[label] = min(best.get(label, 1e9), time.perf_counter() - started)
        for label in runners:
            rival = {
                "ours fp16": "genai-cuda fp16",
                "ours fp16 + int4": "genai-cuda int4",
                "ours fp16 + CUDA graph": "ours fp16",
            }
            speed = batch * NEW / best[label]
            versus = rival.get(label)
            against = "genai" if versus and "genai" in versus else "without graph"
            ratio = f"{best[versus] / best[label]:.2f}x {against}" if versus in best else ""
            table.add(
                f"decode tokens/s ({device})",
                f"{label}, batch {batch}",
                f"{speed:.0f} tokens/s",
                ratio,
                "",
                f"{PROMPT}-token prompt + {NEW} new, greedy, best of 3",
            )
