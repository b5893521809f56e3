"""What a swappable LoRA adapter costs per decode step, ours beside onnxruntime-genai's.

One random-weight Llama (``llama-5M``'s shape by default: ``bench_genai.SIZES``) and a PEFT
adapter of it (rank ``--rank``, q/k/v/o_proj, random non-zero B), batch 1, a 32-token
prompt, 64 new tokens, greedy, 1 thread; rounds alternate between the rows, best of
``--repeat``. A decode step is (a request's seconds - one token's) / 63.

Ours: the base folder (``export_pretrained`` without ``lora``), and one folder exported
with ``lora=[q,k,v,o]`` run with no adapter (rank 0) and with the adapter
(``generate(adapter=...)``); the same for the fused ``target="onnxruntime"`` graph. Every
adapter row's tokens are checked against transformers with the adapter merged
(``merge_and_unload``).

onnxruntime-genai 0.18 (``--genai``): its model builder bakes an adapter into the graph
(``--extra_options adapter_path=...``: a MatMul pair per target, the factors as
initializers); its multi-LoRA needs those initializers turned into graph inputs and the
factors written as an ``.onnx_adapter`` file, which Olive's ``ExtractAdapters`` pass does.
Olive is not installed here, so this script does that step itself (onnx: each
``lora_A``/``lora_B`` initializer becomes an input of the same name;
``onnxruntime.AdapterFormat`` writes the file), then loads it with ``og.Adapters`` and
``set_active_adapter``; genai's own base build is its no-adapter row.

    python bench/bench_lora.py [--size llama-5M] [--rank 16] [--repeat 5] [--genai]
        [--clock wall|cpu]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_genai.py

import argparse
import copy
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.bench_genai import checkpoint, set_genai_threads
from onnx_export import hf

PROMPT, NEW = 32, 64
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
#: A row's run: new tokens -> (tokens, seconds).
Run = Callable[[int], tuple[np.ndarray, float]]


def make_adapter(base: Any, folder: pathlib.Path, rank: int) -> Any:
    """A PEFT adapter of ``base`` saved into ``folder``; ``base`` with it merged."""
    import peft

    torch.manual_seed(1)
    config = peft.LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=TARGETS, init_lora_weights=False
    )
    model = peft.get_peft_model(copy.deepcopy(base), config)
    for name, param in model.named_parameters():  # small updates: the tokens stay varied
        if "lora_B" in name:
            param.data *= 0.05
    model.save_pretrained(folder)
    return model.merge_and_unload().eval()


#: "wall" (perf_counter) or "cpu" (this process's CPU seconds: less moved by other
#: processes on a shared machine; every row runs on one thread in this process).
CLOCK = {"name": "wall"}


def _now() -> float:
    return time.process_time() if CLOCK["name"] == "cpu" else time.perf_counter()


def ours(folder: pathlib.Path, ids: np.ndarray, adapter: pathlib.Path | None) -> Run:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    model = hf.OrtModelForCausalLM.from_pretrained(folder, session_options=options)
    name = None if adapter is None else model.load_adapter(adapter)

    def run(new: int) -> tuple[np.ndarray, float]:
        start = _now()
        out = model.generate(ids, max_new_tokens=new, eos_token_id=[], adapter=name)
        return out[0, ids.shape[1] :], _now() - start

    return run


def extract_adapter(folder: pathlib.Path) -> pathlib.Path:
    """genai's baked LoRA factors made graph inputs; the factors as an ``.onnx_adapter``."""
    import onnx

    path = folder / "model.onnx"
    model = onnx.load(path)
    factors = [i for i in model.graph.initializer if "lora_A" in i.name or "lora_B" in i.name]
    values = {}
    for init in factors:
        array = onnx.numpy_helper.to_array(init)
        values[init.name] = ort.OrtValue.ortvalue_from_numpy(array.copy())
        model.graph.input.append(
            onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        )
        model.graph.initializer.remove(init)
    if not factors:
        raise RuntimeError("genai's builder wrote no lora_A/lora_B initializers")
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")
    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters(values)
    file = folder / "adapter.onnx_adapter"
    adapter.export_adapter(str(file))
    return file


def genai_runs(root: pathlib.Path, adapter: pathlib.Path) -> tuple[Run, Run]:
    """genai's base build, and its build with the adapter, switched in as an .onnx_adapter."""
    import onnxruntime_genai as og

    runs = []
    for folder, extra in (
        (root / "genai", []),
        (root / "genai-lora", ["--extra_options", f"adapter_path={adapter}"]),
    ):
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i"]
        command += [str(root / "ckpt"), "-o", str(folder), "-p", "fp32", "-e", "cpu"]
        command += ["-c", str(root / "cache"), *extra]
        subprocess.run(command, check=True, capture_output=True)
        set_genai_threads(folder, 1)
        file = extract_adapter(folder) if extra else None
        model = og.Model(str(folder))
        adapters = None
        if file is not None:
            adapters = og.Adapters(model)
            adapters.load(str(file), "a")
        runs.append(_genai_run(og, model, adapters))
    return runs[0], runs[1]


def _genai_run(og: Any, model: Any, adapters: Any) -> Run:
    ids = _prompt()

    def run(new: int) -> tuple[np.ndarray, float]:
        start = _now()
        params = og.GeneratorParams(model)
        length = ids.shape[1] + new
        params.set_search_options(max_length=length, min_length=length, do_sample=False)
        generator = og.Generator(model, params)
        if adapters is not None:
            generator.set_active_adapter(adapters, "a")
        generator.append_tokens(ids.astype(np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        seconds = _now() - start
        return np.asarray(generator.get_sequence(0))[ids.shape[1] :], seconds

    return run


def _prompt() -> np.ndarray:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(3, 4000, (1, PROMPT), generator=generator).numpy()


def _eager(model: Any, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = model.generate(torch.from_numpy(ids), max_new_tokens=NEW, do_sample=False)
    return out[0, ids.shape[1] :].numpy()  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="llama-5M")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--genai", action="store_true", help="add onnxruntime-genai's rows")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    CLOCK["name"] = args.clock
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        base = checkpoint(args.size, root / "ckpt")
        base.generation_config.eos_token_id = None
        merged = make_adapter(base, root / "adapter", args.rank)
        ids = _prompt()
        for target in ("onnx", "onnxruntime"):
            hf.export_pretrained(root / "ckpt", root / f"base-{target}", target=target)
            hf.export_pretrained(
                root / "ckpt", root / f"lora-{target}", target=target, lora=TARGETS
            )
        plain = _eager(base, ids)
        rows: list[Row] = []
        for target, label in (("onnx", "ours"), ("onnxruntime", "ours fused")):
            first = f"{label}, base folder"
            rows.append((first, ours(root / f"base-{target}", ids, None), plain, first))
            no_adapter = ours(root / f"lora-{target}", ids, None)
            rows.append((f"{label}, LoRA folder, no adapter", no_adapter, plain, first))
            adapted = ours(root / f"lora-{target}", ids, root / "adapter")
            rows.append((f"{label}, LoRA folder + adapter", adapted, _eager(merged, ids), first))
        if args.genai:
            try:
                genai = genai_runs(root, root / "adapter")
            except Exception as e:  # a competitor's failure is a result here
                print(f"onnxruntime-genai: not run ({type(e).__name__}: {e})")
            else:
                first, adapted = genai
                rows.append(("genai, base build", first, plain, "genai, base build"))
                rows.append(("genai, + adapter", adapted, _eager(merged, ids), "genai, base build"))
        report(rows, args.repeat, args.size, args.rank)


#: (label, run, eager's tokens or None, the label of the row it is compared with)
Row = tuple[str, Run, "np.ndarray | None", str]


def report(rows: list[Row], repeat: int, size: str, rank: int) -> None:
    """Rounds alternating between the rows; a row's step cost against its base row's."""
    full: dict[str, float] = {}
    one: dict[str, float] = {}
    tokens: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        for name, run, _expected, _base in rows:
            tokens[name], seconds = run(NEW)
            full[name] = min(full.get(name, np.inf), seconds)
            one[name] = min(one.get(name, np.inf), run(1)[1])
    step = {name: (full[name] - one[name]) / (NEW - 1) for name in full}
    print(
        f"\n== {size}, LoRA rank {rank} on {', '.join(TARGETS)}: batch 1, prompt {PROMPT}, "
        f"{NEW} new tokens, 1 thread, best of {repeat} =="
    )
    print(f"{'row':<36} {'tokens/s':>9} {'step ms':>8} {'vs base':>8}  eager's tokens")
    for name, _run, expected, base in rows:
        same = "-" if expected is None else str(bool(np.array_equal(tokens[name], expected)))
        print(
            f"{name:<36} {NEW / full[name]:>9.1f} {step[name] * 1e3:>8.3f} "
            f"{step[name] / step[base]:>7.2f}x  {same}"
        )


if __name__ == "__main__":
    main()
