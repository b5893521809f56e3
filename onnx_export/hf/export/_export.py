"""``export_pretrained``: a checkpoint folder -> a folder ready for ONNX Runtime."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Literal

from onnx_export.hf._errors import CheckpointError
from onnx_export.hf._tasks import TASKS, model_class, read_checkpoint, resolve_task
from onnx_export.hf.export._folder import (
    MANIFEST_NAME,
)
from onnx_export.hf.export._folder import (
    check_output as _check_output,
)
from onnx_export.hf.export._folder import (
    copy_side_files as _copy_side_files,
)
from onnx_export.hf.export._folder import (
    replace_folder as _replace_folder,
)
from onnx_export.hf.export._precision import (
    Precision,
)
from onnx_export.hf.export._precision import (
    check_dtype as _check_dtype,
)
from onnx_export.hf.export._precision import (
    default_dtype as _default_dtype,
)
from onnx_export.hf.export._precision import (
    in_dtype as _in_dtype,
)
from onnx_export.hf.export._precision import (
    narrow_args as _narrow_args,
)
from onnx_export.hf.export._versions import require_transformers

__all__ = ["ExportedCheckpoint", "export_pretrained", "MANIFEST_NAME"]

# Tasks whose model type the architecture table does not name load with these.
_AUTO_CLASSES = {
    "text-generation": "AutoModelForCausalLM",
    "text2text-generation": "AutoModelForSeq2SeqLM",
    "automatic-speech-recognition": "AutoModelForSpeechSeq2Seq",
    "feature-extraction": "AutoModel",
    "sentence-similarity": "AutoModel",
    "fill-mask": "AutoModelForMaskedLM",
    "text-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "multiple-choice": "AutoModelForMultipleChoice",
    "image-classification": "AutoModelForImageClassification",
    "semantic-segmentation": "AutoModelForSemanticSegmentation",
    "object-detection": "AutoModelForObjectDetection",
    "depth-estimation": "AutoModelForDepthEstimation",
    "audio-classification": "AutoModelForAudioClassification",
    "image-to-text": "AutoModelForImageTextToText",
    "image-text-to-text": "AutoModelForImageTextToText",
    "zero-shot-image-classification": "AutoModelForZeroShotImageClassification",
}


@dataclasses.dataclass(frozen=True)
class ExportedCheckpoint:
    """What :func:`export_pretrained` wrote.

    Attributes:
        path: The output folder.
        task: The task exported.
        model_type: The architecture (``config.json``'s ``model_type``).
        onnx_files: The ONNX files written, in the order they run
            (``model.onnx``, or ``encoder_model.onnx`` then ``decoder_model.onnx``).
        copied_files: Config, generation config and tokenizer files copied beside them.
        seconds: Wall time of the export.

    Example:
        >>> from onnx_export.hf import export_pretrained
        >>> result = export_pretrained("t5-checkpoint", "t5-onnx")  # doctest: +SKIP
        >>> result.onnx_files  # doctest: +SKIP
        ('encoder_model.onnx', 'decoder_model.onnx')
    """

    path: pathlib.Path
    task: str
    model_type: str
    onnx_files: tuple[str, ...]
    copied_files: tuple[str, ...]
    seconds: float


#: ``export_pretrained``'s ``dtype``: the precision of the weights and the graphs.


def _load_model(path: pathlib.Path, task: str, model_type: str, dtype: Precision) -> Any:
    import torch

    try:
        import transformers
    except ImportError as e:
        raise CheckpointError(
            f"Exporting a checkpoint needs transformers ({e}); install it "
            "with pip install 'onnx-export[hf]'."
        ) from e
    require_transformers(transformers.__version__)

    name = model_class(model_type, task) or _AUTO_CLASSES[task]
    auto = getattr(transformers, name, None)
    if auto is None:
        raise CheckpointError(
            f"transformers {transformers.__version__} has no {name} (the class for "
            f"{model_type!r} and {task!r}); install the transformers version that wrote the "
            "checkpoint."
        )
    try:  # float32 by default whatever the checkpoint's dtype: ORT's CPU kernels need it
        model = auto.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(
            f"transformers could not load {os.fspath(path)!r} as {name} for "
            f"task {task!r}: {str(e).rstrip('.')}. The folder needs config.json and the weights "
            "(*.safetensors) that `save_pretrained` writes."
        ) from e
    return model


def _check_target(target: str) -> None:
    """``"onnx"``, or a target this version's ``ExportOptions`` knows."""
    from onnx_export._options import ExportOptions

    if target == "onnx":
        return
    if target != "onnxruntime":
        raise CheckpointError(f"target must be 'onnx' or 'onnxruntime', got {target!r}.")
    if "target" not in {f.name for f in dataclasses.fields(ExportOptions)}:
        raise CheckpointError(
            f"target={target!r} is not available in this version of onnx_export "
            "(ExportOptions has no 'target'); use target='onnx'."
        )


def _export_options(
    dynamic_shapes: Any,
    opset: int | None,
    target: str,
    strategies: tuple[str, ...] = (),
    dtype: Precision = "float32",
) -> Any:
    import onnx_export

    # verify=False: export_pretrained checks every graph against transformers itself after
    # the export (with the task's own inputs); the default check's example inputs can also
    # exceed what a fused kernel's CPU form takes (GQA: batch 1 with a past and a prompt).
    kwargs: dict[str, Any] = {"dynamic_shapes": dynamic_shapes, "verify": False}
    if dtype != "float32":
        kwargs["dtype"] = dtype
    if strategies:
        kwargs["capture_strategies"] = strategies
    if opset is not None:
        kwargs["opset_version"] = opset
    if target != "onnx":
        kwargs["target"] = target
    return onnx_export.ExportOptions(**kwargs)


def _warn_fallback(spec: Any, error: Exception) -> None:
    """Say which axes are kept static, and why (the dynamic export's first line)."""
    from onnx_export.capture._user_code import warn_at_user_line
    from onnx_export.errors import StaticDimensionWarning

    dynamic = {k: set(v) for k, v in (spec.dynamic_shapes or {}).items()}
    kept = {k: set(v) for k, v in (spec.fallback or {}).items()}
    fixed = sorted(
        f"{name}[{axis}] ({spec.dynamic_shapes[name][axis]})"
        for name, axes in dynamic.items()
        for axis in axes - kept.get(name, set())
    )
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:400]
    warn_at_user_line(
        f"{spec.file_name}: {', '.join(fixed) or 'some axes'} exported static at the example's "
        f"sizes: with them dynamic the export failed: {reason}",
        StaticDimensionWarning,
    )


def _export_graph(spec: Any, opset: int | None, target: str, dtype: Precision) -> Any:
    """``spec`` exported; with its ``fallback`` dimensions when the dynamic ones fail.

    The attempt with more dynamic dimensions tries the fast capture strategy only: a model
    that fixes them fails it quickly, and is then exported as usual with the fallback.
    """
    import onnx_export
    from onnx_export.errors import ExportInputError, OnnxExportError
    from onnx_export.hf.export._fused_decoder import with_fused_ops  # GQA's registry, if fused

    if spec.fallback is None:
        options = _export_options(spec.dynamic_shapes, opset, target, dtype=dtype)
        options = with_fused_ops(spec, options)
        return onnx_export.dynamo_export(spec.module, *spec.args, export_options=options)
    try:
        options = _export_options(spec.dynamic_shapes, opset, target, ("non_strict",), dtype)
        options = with_fused_ops(spec, options)
        return onnx_export.dynamo_export(spec.module, *spec.args, export_options=options)
    except ExportInputError:
        raise
    except OnnxExportError as error:
        _warn_fallback(spec, error)
    options = with_fused_ops(spec, _export_options(spec.fallback, opset, target, dtype=dtype))
    return onnx_export.dynamo_export(spec.module, *spec.args, export_options=options)


def _write_graphs(
    model: Any,
    task: str,
    folder: pathlib.Path,
    opset: int | None,
    target: str,
    dtype: Precision = "float32",
    lora: tuple[str, ...] = (),
) -> list[str]:
    import torch

    from onnx_export.hf.export._fused_decoder import FusedGraphSpec, onnxruntime_graphs
    from onnx_export.hf.export._logits import keep_last_logits
    from onnx_export.hf.export._lora import with_lora
    from onnx_export.hf.export._parity import check_against_eager
    from onnx_export.hf.export._task_graphs import graphs_for_task
    from onnx_export.hf.runtime._session import PADDING_SIDE_KEY

    written = []
    with torch.no_grad():
        with _default_dtype(dtype):  # random example pixels and features in the model's dtype
            specs = graphs_for_task(model, task)
        if dtype != "float32":
            specs = [dataclasses.replace(s, args=_narrow_args(s.args, dtype)) for s in specs]
        if target != "onnx":
            specs = onnxruntime_graphs(model, task, specs)
        if lora:
            specs = [with_lora(model, spec, lora) for spec in specs]
        for spec in specs:
            program = _export_graph(spec, opset, target, dtype)
            if isinstance(spec, FusedGraphSpec):  # GQA's rows: tokens first, then padding
                program.model.metadata_props[PADDING_SIDE_KEY] = "right"
            else:  # a decoder's head on the last k positions when asked (a prefill's 1)
                keep_last_logits(program.model)
            checked = getattr(spec, "check_args", spec.args)  # the fused decoder's own
            check_against_eager(spec.file_name, spec.module, program, checked, dtype)
            program.save(folder / spec.file_name)
            written.append(spec.file_name)
    return written


def _lora_targets(
    lora: Sequence[str] | str | os.PathLike[str] | None, task: str
) -> tuple[str, ...]:
    """``lora``'s target module names, checked; ``()`` without LoRA inputs."""
    if lora is None:
        return ()
    if task != "text-generation":
        raise CheckpointError(
            f"lora= makes adapters swappable in the text-generation graph; this export is "
            f"{task!r}. Merge the adapter into the checkpoint (PEFT's merge_and_unload) instead."
        )
    from onnx_export.hf.export._lora import lora_target_names

    return lora_target_names(lora)


def export_pretrained(
    model_or_dir: str | os.PathLike[str] | Any,
    out_dir: str | os.PathLike[str],
    *,
    task: str | None = None,
    opset: int | None = None,
    target: Literal["onnx", "onnxruntime"] = "onnx",
    quantize: Literal["int4", "int8"] | None = None,
    quantize_block_size: int = 32,
    quantize_accuracy_level: int | None = 4,
    quantize_embeddings: bool = False,
    quantize_head: bool = True,
    dtype: Precision = "float32",
    lora: Sequence[str] | str | os.PathLike[str] | None = None,
) -> ExportedCheckpoint:
    """Export a ``transformers`` checkpoint to a folder that ONNX Runtime can generate with.

    Decoders (``text-generation``, and the decoder of ``text2text-generation`` and
    ``automatic-speech-recognition``) are exported once for the prompt and for every
    later step: batch, sequence and past length are dynamic (past length 0 for the
    prompt). Their inputs are ``input_ids``, ``attention_mask``, ``position_ids``,
    ``past_key_values.{i}.key`` / ``.value``; their outputs ``logits`` and
    ``present.{i}.key`` / ``.value``. Everything is written to a temporary folder beside
    ``out_dir``, which is then renamed: a failed export leaves ``out_dir`` as it was.

    Args:
        model_or_dir: A local folder written by ``save_pretrained`` (config.json and
            safetensors weights; nothing is downloaded; the weights are loaded as
            float32), or a loaded ``transformers.PreTrainedModel`` (exported in its dtype).
        out_dir: The folder to write: ``model.onnx`` (or ``encoder_model.onnx`` and
            ``decoder_model.onnx``), ``onnx_export.json``, and the config, generation
            config and tokenizer files found beside the weights.
        task: One of :data:`onnx_export.hf.TASKS`; by default inferred from
            ``config.json``'s ``architectures``.
        opset: ONNX opset; the exporter's default when ``None``.
        target: ``"onnx"``; ``"onnxruntime"`` only when this version's
            ``ExportOptions`` has a ``target``.
        quantize: ``"int4"``: weight-only 4-bit ``MatMulNBits`` (ONNX Runtime's
            MatMulNBitsQuantizer) for every MatMul by a weight, for decoders; ``"int8"``:
            int8 weights and activations: for a decoder, weights per output column and
            activations per row (``MatMulInteger``; rows decoded together get their
            tokens alone), for an encoder ``quantize_dynamic``. Float weights when
            ``None``.
        quantize_block_size: int4 block size (a power of 2, 16 to 256).
        quantize_accuracy_level: int4 MatMulNBits ``accuracy_level`` (4: int8
            activations, the fastest on CPU; ``None``: ORT's default).
        quantize_embeddings: int4: the embedding table too (``GatherBlockQuantized``).
        quantize_head: int4: the output head (the MatMul writing ``logits``) too.
        dtype: ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``: the weights are
            loaded (or a passed model is copied) in that dtype and every graph is exported
            with ``ExportOptions(dtype=...)``: half-precision weights, past keys and values
            and logits, softmax and reductions in float32, float32 inputs accepted. Each
            graph is checked against eager transformers in the same dtype, within that
            dtype's tolerance. With ``quantize="int4"`` the ``MatMulNBits`` scales are in
            the dtype too. See docs/gpu.md.
        lora: Text generation: make LoRA adapters swappable at run time. Target module
            names (``["q_proj", "v_proj"]``, ``["all-linear"]``: every Linear but the
            head), or a PEFT adapter folder whose modules name them. Each target Linear
            of every layer gets two more graph inputs, ``lora.<module path>.A`` (rank,
            in) and ``.B`` (out, rank), in the graph's precision, the rank dynamic; the
            runtime's ``load_adapter`` feeds an adapter's factors, or none for the base
            model. The manifest lists the targets; no ``genai_config.json`` is written
            (onnxruntime-genai would not feed the inputs). See docs/huggingface.md,
            "LoRA adapters".

    Returns:
        What was written, where, and how long it took.

    Raises:
        CheckpointError: No config.json, an architecture that cannot be exported, a task
            that does not fit it, or weights transformers cannot load; a LoRA target that
            is not a Linear module of the model, or ``lora`` for another task.
        AdapterError: ``lora`` names an adapter folder that is not a LoRA adapter the
            graph can take.
        OnnxExportError: The export itself failed (the message says at which stage).

    Example:
        >>> import tempfile, pathlib, transformers
        >>> from onnx_export.hf import export_pretrained
        >>> config = transformers.BertConfig(
        ...     vocab_size=50, hidden_size=16, num_hidden_layers=1,
        ...     num_attention_heads=2, intermediate_size=32)
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> transformers.BertModel(config).save_pretrained(folder / "bert")
        >>> result = export_pretrained(folder / "bert", folder / "onnx")
        >>> result.task, result.onnx_files
        ('feature-extraction', ('model.onnx',))
    """
    started = time.perf_counter()
    _check_target(target)
    _check_dtype(dtype)
    quantized = None
    if quantize is not None:
        from onnx_export.hf.export._quantize import QuantizeOptions

        quantized = QuantizeOptions(
            quantize,
            quantize_block_size,
            quantize_accuracy_level,
            quantize_embeddings,
            quantize_head,
        )
    source: pathlib.Path | None = None
    out = pathlib.Path(out_dir).absolute()
    if isinstance(model_or_dir, (str, os.PathLike)):
        checkpoint = read_checkpoint(model_or_dir)
        source = checkpoint.path
        _check_output(out, source)
        model_type, architectures = checkpoint.model_type, checkpoint.architectures
        task = resolve_task(model_type, architectures, task, checkpoint.config)
        model = _load_model(source, task, model_type, dtype)
    else:
        model = model_or_dir
        config = getattr(model, "config", None)
        model_type = str(getattr(config, "model_type", type(model).__name__))
        settings = config.to_dict() if config is not None else None
        task = resolve_task(model_type, (type(model).__name__,), task, settings)
    _check_output(out, source)
    if task == "image-text-to-text" and target != "onnx":
        raise CheckpointError(
            f"target={target!r} is not available for image-text-to-text: its fused decoder "
            "(GroupQueryAttention) takes input_ids, and this task's decoder takes "
            "inputs_embeds. Use target='onnx' (the default)."
        )
    targets = _lora_targets(lora, task)
    model = _in_dtype(model, dtype)
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    staged.chmod(0o755)  # mkdtemp's 0700 would outlive the rename
    try:
        onnx_files = _write_graphs(model, task, staged, opset, target, dtype, targets)
        if quantized is not None:
            from onnx_export.hf.export._quantize import quantize_model_file

            for name in onnx_files:
                quantize_model_file(staged / name, quantized)
        copied = _copy_side_files(source, model, staged)
        genai = target == "onnxruntime" and onnx_files == ["model.onnx"]
        # genai's loop does not feed LoRA inputs: with them its og.Model could not run
        if genai and task == "text-generation" and not targets:
            from onnx_export.hf.export._genai_config import write_genai_config

            copied.append(write_genai_config(staged, model))  # onnxruntime-genai's og.Model
        manifest: dict[str, Any] = {
            "task": task,
            "model_type": model_type,
            "onnx_files": onnx_files,
            **({"lora": {"targets": list(targets)}} if targets else {}),
            **({"quantization": quantized.as_manifest()} if quantized is not None else {}),
        }
        (staged / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        _replace_folder(staged, out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return ExportedCheckpoint(
        out, task, model_type, tuple(onnx_files), tuple(copied), time.perf_counter() - started
    )


assert set(_AUTO_CLASSES) == set(TASKS)
