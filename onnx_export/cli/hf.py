"""``onnx-export hf CHECKPOINT_DIR -o OUT_DIR``: a transformers checkpoint folder to ONNX."""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable

from onnx_export._options import DEFAULT_OPSET, SUPPORTED_OPSETS
from onnx_export.cli._common import (
    CommandError,
    Status,
    Subcommands,
    UsageError,
    add_command,
    one_line,
    quiet_stderr,
    require_extra,
    writable_folder,
)
from onnx_export.hf._errors import CheckpointError
from onnx_export.hf._tasks import TASK_ALIASES, TASKS, read_checkpoint, resolve_task

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``hf CHECKPOINT_DIR -o OUT_DIR [--task TASK] [--target T] [--lora-targets N] ...``."""
    parser = add_command(
        commands,
        "hf",
        help="export a Hugging Face checkpoint folder, ready to generate with ONNX Runtime",
        description="Export the transformers checkpoint in CHECKPOINT_DIR (config.json and "
        "safetensors, as save_pretrained writes them; nothing is downloaded) to OUT_DIR: "
        "model.onnx (or encoder_model.onnx + decoder_model.onnx), its config, generation "
        "config and tokenizer files. Generate with onnx_export.hf.OrtModelForCausalLM or "
        "OrtModelForSeq2SeqLM. Exits 1 when the export fails, 2 when the folder, the "
        "architecture or the task cannot be used, or torch is not installed.",
        handler=_run,
    )
    parser.add_argument("checkpoint", type=pathlib.Path, metavar="CHECKPOINT_DIR")
    parser.add_argument(
        "-o", "--output", type=pathlib.Path, required=True, metavar="OUT_DIR",
        help="the folder to write (replaced only once everything is written)",
    )  # fmt: skip
    parser.add_argument(
        "--task", choices=(*TASKS, *TASK_ALIASES), default=None, metavar="TASK",
        help=f"what to export: {', '.join(TASKS)}; by default inferred from config.json's "
        "architectures",
    )  # fmt: skip
    parser.add_argument(
        "--opset",
        type=int,
        default=None,
        metavar="N",
        help=f"ONNX opset, {SUPPORTED_OPSETS.start} to {SUPPORTED_OPSETS.stop - 1} "
        f"(default {DEFAULT_OPSET})",
    )
    parser.add_argument(
        "--target", choices=("onnx", "onnxruntime"), default="onnx",
        help="'onnx' (standard ONNX, the default) or 'onnxruntime' (ExportOptions.target)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
        help="the weights' and graphs' precision (default float32); float16/bfloat16 are "
        "for CUDA: softmax and reductions stay float32, inputs may come as float32",
    )  # fmt: skip
    parser.add_argument(
        "--quantize", choices=("int4", "int8"), default=None,
        help="int4: weight-only 4-bit MatMulNBits (decoders); int8: int8 weights and "
        "activations (decoders: a scale per row; encoders: quantize_dynamic)",
    )  # fmt: skip
    parser.add_argument(
        "--quantize-block-size", type=int, default=32, metavar="N",
        help="int4 block size (a power of 2, 16 to 256; default 32)",
    )  # fmt: skip
    parser.add_argument(
        "--quantize-accuracy-level", type=int, default=4, metavar="L",
        help="int4 MatMulNBits accuracy_level (0-4; default 4: int8 activations)",
    )  # fmt: skip
    parser.add_argument(
        "--quantize-embeddings", action="store_true",
        help="int4: quantize the embedding table too",
    )  # fmt: skip
    parser.add_argument(
        "--no-quantize-head", dest="quantize_head", action="store_false",
        help="int4: keep the output head (lm_head) in float",
    )  # fmt: skip
    lora = parser.add_mutually_exclusive_group()
    lora.add_argument(
        "--lora-targets", default=None, metavar="NAMES",
        help="text generation: make LoRA adapters of these Linear modules swappable at run "
        "time, comma-separated (q_proj,v_proj; all-linear: every Linear but the head); "
        "each gets low-rank A/B graph inputs of any rank",
    )  # fmt: skip
    lora.add_argument(
        "--lora", default=None, type=pathlib.Path, metavar="ADAPTER_DIR",
        help="as --lora-targets, with the modules a PEFT adapter folder adapts "
        "(adapter_config.json, adapter_model.safetensors)",
    )  # fmt: skip


def _int4_options(args: argparse.Namespace) -> list[str]:
    """The int4 options given away from their defaults (they need ``--quantize int4``)."""
    given = [
        ("--quantize-block-size", args.quantize_block_size != 32),
        ("--quantize-accuracy-level", args.quantize_accuracy_level != 4),
        ("--quantize-embeddings", args.quantize_embeddings),
        ("--no-quantize-head", not args.quantize_head),
    ]
    return [option for option, changed in given if changed]


def _refuse_early(args: argparse.Namespace) -> None:
    """The checkpoint's architecture and task (and --lora's adapter) checked without torch."""
    int4 = _int4_options(args)
    if int4 and args.quantize != "int4":
        now = f"--quantize {args.quantize}" if args.quantize else "no --quantize"
        raise UsageError(
            f"{', '.join(int4)} set{'s' if len(int4) == 1 else ''} int4 quantization, but "
            f"the command has {now}: add --quantize int4, or leave "
            f"{'it' if len(int4) == 1 else 'them'} out."
        )
    try:
        checkpoint = read_checkpoint(args.checkpoint)
        resolve_task(checkpoint.model_type, checkpoint.architectures, args.task, checkpoint.config)
        if args.lora is not None:
            from onnx_export.hf._peft import read_lora_adapter  # numpy: only when asked

            read_lora_adapter(args.lora)
    except CheckpointError as e:
        raise UsageError(one_line(str(e))) from e


def _lora(args: argparse.Namespace) -> list[str] | pathlib.Path | None:
    """``export_pretrained``'s ``lora``: the adapter folder, the target names, or ``None``."""
    if args.lora_targets is None:
        return args.lora  # type: ignore[no-any-return]  # argparse's Namespace is untyped
    names = [n.strip() for n in args.lora_targets.split(",") if n.strip()]
    if not names:
        raise UsageError("--lora-targets: give module names, e.g. --lora-targets q_proj,v_proj.")
    return names


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    writable_folder(args.output, "-o/--output")  # before any work (imports take seconds)
    _refuse_early(args)
    require_extra("hf", "hf")  # the hf extra installs torch & co. too: name it alone
    from onnx_export._options import SUPPORTED_OPSETS
    from onnx_export.errors import ExportInputError, OnnxExportError
    from onnx_export.hf import export_pretrained

    if args.opset is not None and args.opset not in SUPPORTED_OPSETS:
        raise UsageError(
            f"--opset {args.opset}: the supported opsets are {SUPPORTED_OPSETS.start} to "
            f"{SUPPORTED_OPSETS.stop - 1}."
        )
    with Status()(f"Exporting {args.checkpoint}"), quiet_stderr(args.verbose):
        try:
            result = export_pretrained(
                args.checkpoint,
                args.output,
                task=args.task,
                opset=args.opset,
                target=args.target,
                quantize=args.quantize,
                quantize_block_size=args.quantize_block_size,
                quantize_accuracy_level=args.quantize_accuracy_level,
                quantize_embeddings=args.quantize_embeddings,
                quantize_head=args.quantize_head,
                dtype=args.dtype,
                lora=_lora(args),
            )
        except ExportInputError as e:
            raise UsageError(one_line(str(e))) from e
        except OnnxExportError as e:
            raise CommandError(f"exporting {args.checkpoint} failed: {one_line(str(e))}") from e
        except OSError as e:
            raise CommandError(f"cannot write {args.output}: {e.strerror or e}") from e
    sizes = ", ".join(
        f"{name} ({(result.path / name).stat().st_size / 1024:.1f} KiB)"
        for name in result.onnx_files
    )
    echo(
        f"Exported {result.model_type} for {result.task} to {result.path} in "
        f"{result.seconds:.1f} s: {sizes}; copied {', '.join(result.copied_files)}"
    )
    return 0
