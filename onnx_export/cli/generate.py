"""``onnx-export generate``: text in, text out with an exported decoder, without torch.

Reads the folder's ``tokenizer.json`` with the ``tokenizers`` library (and its chat template
with ``jinja2`` for ``--chat``): the ``text`` extra, ``pip install 'onnx-export[text]'``.
An ``image-text-to-text`` folder (LLaVA, Qwen2-VL...) takes ``--image PATH`` (repeat it for
several images), read with Pillow: the ``vision`` extra.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from onnx_export.cli._common import CommandError, Subcommands, UsageError, add_command, one_line

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``generate FOLDER PROMPT [--max-new-tokens N] [--chat] [--adapter DIR] ...``."""
    parser = add_command(
        commands,
        "generate",
        help="continue a prompt with a folder `onnx-export hf` wrote (text in, text out)",
        description="Tokenize PROMPT with the folder's tokenizer.json, generate with "
        "OrtModelForCausalLM (greedy unless --do-sample or --num-beams), or for a T5/BART "
        "folder with OrtModelForSeq2SeqLM (greedy unless --do-sample), and print the new "
        "text. --chat puts PROMPT through the chat template as a user message. An "
        "image-text-to-text folder takes --image PATH (the images and PROMPT through its "
        "processor's settings and chat template). Needs no torch; needs the text extra "
        "(pip install 'onnx-export[text]'; images: the vision extra). Exits 1 when "
        "generation fails, 2 when the folder or an option cannot be used.",
        handler=_run,
    )
    parser.add_argument("folder", type=pathlib.Path, metavar="FOLDER", help="the exported folder")
    parser.add_argument("prompt", metavar="PROMPT", help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens at most (32)")
    parser.add_argument(
        "--image",
        action="append",
        type=pathlib.Path,
        default=None,
        metavar="PATH",
        help="an image for an image-text-to-text folder (repeat for several, in the order "
        "the prompt places them)",
    )
    parser.add_argument("--chat", action="store_true", help="apply the chat template")
    parser.add_argument("--num-beams", type=int, default=None, help="beam search with N beams")
    parser.add_argument("--do-sample", action="store_true", default=None, help="sample")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the top k")
    parser.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass")
    parser.add_argument("--repetition-penalty", type=float, default=None, help="e.g. 1.2")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")
    parser.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="a stop string (repeat)"
    )
    parser.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help="(cpu)")
    parser.add_argument("--stream", action="store_true", help="print tokens as they come")
    parser.add_argument(
        "--json-schema",
        default=None,
        metavar="SCHEMA",
        help="the output is JSON valid under this schema: a .json file or the schema's text "
        "(needs the structured extra)",
    )
    parser.add_argument("--regex", default=None, help="the output matches this regex")
    parser.add_argument(
        "--grammar", type=pathlib.Path, default=None, metavar="FILE", help="a Lark grammar file"
    )
    parser.add_argument(
        "--adapter",
        type=pathlib.Path,
        default=None,
        metavar="ADAPTER_DIR",
        help="generate with this PEFT LoRA adapter folder (the folder exported with --lora or "
        "--lora-targets naming its modules)",
    )
    parser.add_argument(
        "--prompt-lookup",
        type=int,
        default=None,
        metavar="K",
        help="speculative decoding: draft K tokens from the prompt's n-grams (greedy)",
    )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    names = ("num_beams", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
    settings = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    if args.stop:
        settings["stop_strings"] = list(args.stop)
    if args.json_schema is not None:
        settings["json_schema"] = _text_or_file(args.json_schema, "--json-schema")
    if args.regex is not None:
        settings["regex"] = args.regex
    if args.grammar is not None:
        settings["grammar"] = _text_or_file(str(args.grammar), "--grammar", file_only=True)
    if args.prompt_lookup is not None:
        settings["prompt_lookup_num_tokens"] = args.prompt_lookup
    return settings


#: The exported folders' tasks that take text; the others take features or images.
_CAUSAL_TASKS = ("text-generation",)
_VLM_TASKS = ("image-text-to-text",)
#: The options an image-text-to-text folder's pipeline takes (besides --image).
_VLM_OPTIONS = ("num_beams", "do_sample", "temperature", "top_k", "top_p", "seed", "chat")
_SEQ2SEQ_TASKS = ("text2text-generation",)
#: The options only the decoder-only loop has (beam search, processors, streaming).
_CAUSAL_ONLY = (
    *("num_beams", "repetition_penalty", "stop", "chat", "stream"),
    *("json_schema", "regex", "grammar", "prompt_lookup", "adapter"),
)


def _task(folder: pathlib.Path) -> str | None:
    """The task the folder's manifest names, or ``None`` (from_pretrained then says why)."""
    try:
        manifest = json.loads((folder / "onnx_export.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(manifest.get("task")) if isinstance(manifest, dict) else None


def _load(args: argparse.Namespace) -> Any:
    """The folder's model class for its task, loaded; a UsageError for a task without text."""
    from onnx_export.hf import CheckpointError, OrtModelForCausalLM, OrtModelForSeq2SeqLM

    task = _task(args.folder)
    if task in _VLM_TASKS:
        return _load_vlm(args)
    if args.image:
        raise UsageError(
            f"--image: {args.folder} holds a {task or 'text'!r} model, which takes no images; "
            "--image is for image-text-to-text folders."
        )
    if task is not None and task not in (*_CAUSAL_TASKS, *_SEQ2SEQ_TASKS):
        raise UsageError(
            f"{args.folder} holds a {task!r} model, which takes no text: `generate` runs "
            "text-generation (decoders), text2text-generation (T5, BART) and "
            "image-text-to-text (with --image) folders."
        )
    seq2seq = task in _SEQ2SEQ_TASKS
    if seq2seq:
        used = [f"--{n.replace('_', '-')}" for n in _CAUSAL_ONLY if getattr(args, n)]
        if used:
            raise UsageError(
                f"{', '.join(used)}: not for an encoder-decoder ({task}); it takes greedy "
                "decoding or --do-sample with --temperature, --top-k, --top-p, --seed."
            )
    model_class = OrtModelForSeq2SeqLM if seq2seq else OrtModelForCausalLM
    try:
        model = model_class.from_pretrained(args.folder, providers=[args.provider])
        if isinstance(model, OrtModelForCausalLM) and args.adapter is not None:
            model.set_adapter(model.load_adapter(args.adapter))  # AdapterError: exit 2
    except CheckpointError as e:
        raise UsageError(one_line(str(e))) from e
    return model


def _load_vlm(args: argparse.Namespace) -> Any:
    """The folder's image-text-to-text pipeline.

    A UsageError without --image, or for an option the pipeline does not take.
    """
    from onnx_export.hf import CheckpointError, GenerationError
    from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline

    if not args.image:
        raise UsageError(
            f"{args.folder} holds an image-text-to-text model: give the image with --image "
            "PATH (repeat it for several images)."
        )
    names = (n for n in _CAUSAL_ONLY if n not in _VLM_OPTIONS)
    used = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n)]
    if used:
        raise UsageError(
            f"{', '.join(used)}: not for an image-text-to-text folder; it takes --image, "
            "--max-new-tokens, --num-beams, --do-sample, --temperature, --top-k, --top-p, "
            "--seed."
        )
    try:
        return ImageTextToTextPipeline.from_folder(args.folder, providers=[args.provider])
    except (CheckpointError, GenerationError) as e:
        raise UsageError(one_line(str(e))) from e


def _images(paths: list[pathlib.Path]) -> list[Any]:
    """The images ``--image`` names, as RGB Pillow images."""
    try:
        from PIL import Image
    except ImportError as e:
        raise UsageError("--image needs Pillow: pip install 'onnx-export[vision]'.") from e
    images = []
    for path in paths:
        try:
            with Image.open(path) as image:
                images.append(image.convert("RGB"))
        except (OSError, ValueError) as e:
            raise UsageError(
                f"--image {path}: not an image Pillow can read ({type(e).__name__}: {e})."
            ) from e
    return images


def _run_vlm(pipe: Any, args: argparse.Namespace, echo: Callable[[str], None]) -> int:
    from onnx_export.hf import GenerationError

    images = _images(list(args.image))
    settings = {n: getattr(args, n) for n in _VLM_OPTIONS[:-1] if getattr(args, n) is not None}
    try:
        text = pipe(images, args.prompt, max_new_tokens=args.max_new_tokens, **settings)
    except GenerationError as e:
        raise CommandError(one_line(str(e))) from e
    echo(text)
    return 0


def _check_options(args: argparse.Namespace) -> None:
    """Options that cannot go together: exit 2 before anything loads."""
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}.")
    if args.stream and args.num_beams is not None and args.num_beams > 1:
        raise UsageError(
            f"--stream prints each token as it is chosen, but with --num-beams "
            f"{args.num_beams} the beams change until the end: drop one of them."
        )
    if args.prompt_lookup is not None:
        beams = args.num_beams is not None and args.num_beams > 1
        if beams or args.do_sample:
            option = f"--num-beams {args.num_beams}" if beams else "--do-sample"
            raise UsageError(
                f"--prompt-lookup decodes greedily (speculation keeps greedy's tokens), so it "
                f"does not go with {option}: drop one of them."
            )
        if args.prompt_lookup < 1:
            raise UsageError(f"--prompt-lookup must be >= 1, got {args.prompt_lookup}.")


def _check_text(model: Any, args: argparse.Namespace) -> None:
    """The folder's tokenizer (and chat template for --chat) exist: else exit 2 at once."""
    from onnx_export.hf import GenerationError

    try:
        tokenizer = model.tokenizer
    except GenerationError as e:
        raise UsageError(one_line(str(e))) from e
    if args.chat and getattr(tokenizer, "chat_template", None) is None:
        raise UsageError(
            f"--chat: {args.folder} has no chat template (tokenizer_config.json's "
            "chat_template, or chat_template.jinja); give the prompt as plain text instead."
        )


def _text_or_file(value: str, option: str, *, file_only: bool = False) -> str:
    """``value`` itself when it is inline JSON, else the text of the file it names."""
    if not file_only and value.lstrip().startswith("{"):
        return value
    try:
        return pathlib.Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"{option} {value!r} cannot be read ({e.__class__.__name__}: {e}): pass a "
            "readable file" + ("" if file_only else " or the schema's JSON text") + "."
        ) from e


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    from onnx_export.hf import GenerationError

    _check_options(args)
    model = _load(args)
    if getattr(model, "task", None) == "image-text-to-text":
        return _run_vlm(model, args, echo)
    _check_text(model, args)
    prompt: Any = [{"role": "user", "content": args.prompt}] if args.chat else args.prompt
    kwargs: dict[str, Any] = {"max_new_tokens": args.max_new_tokens, "seed": args.seed}
    if args.stream:
        tokenizer = model.tokenizer
        shown: list[int] = []

        def show(tokens: Any) -> None:
            before = tokenizer.decode(shown)
            shown.append(int(tokens[0]))
            sys.stdout.write(tokenizer.decode(shown)[len(before) :])
            sys.stdout.flush()

        kwargs["streamer"] = show
    settings = _settings(args)
    try:
        text = model.generate_text(prompt, **kwargs, **settings)
    except GenerationError as e:
        raise CommandError(one_line(str(e))) from e
    if args.stream:
        echo("")
    else:
        echo(text if isinstance(text, str) else "\n".join(text))
    return 0
