"""The exported folder on disk: side files copied, the output checked, replaced atomically."""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any

from onnx_export.hf._errors import CheckpointError

__all__ = ["MANIFEST_NAME", "copy_side_files", "check_output", "replace_folder"]

#: What the runtime reads first in an exported folder: the task and the files.
MANIFEST_NAME = "onnx_export.json"

# Files copied beside the model so that the folder is self-contained (no weights).
_SIDE_FILES = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
    "normalizer.json",
)


def copy_side_files(source: pathlib.Path | None, model: Any, folder: pathlib.Path) -> list[str]:
    copied = []
    if source is not None:
        for name in _SIDE_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, folder / name)
                copied.append(name)
    if "config.json" not in copied:
        model.config.to_json_file(folder / "config.json")
        copied.append("config.json")
    generation = getattr(model, "generation_config", None)
    can_generate = getattr(model, "can_generate", lambda: False)()
    if "generation_config.json" not in copied and generation is not None and can_generate:
        generation.to_json_file(folder / "generation_config.json")
        copied.append("generation_config.json")
    return copied


def check_output(out: pathlib.Path, source: pathlib.Path | None) -> None:
    """Refuses, before any work, an ``out_dir`` whose replacement would lose the user's files.

    ``out_dir`` may be new, empty, or a folder this exporter wrote (it holds the manifest):
    only those are replaced. The checkpoint folder itself, a folder above it, a file, or a
    folder with other files in it are refused.
    """
    where = os.fspath(out)
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"Output {where!r} exists and is not a folder; name a folder.")
    if source is not None:
        checkpoint = source.resolve()
        if out.resolve() == checkpoint or out.resolve() in checkpoint.parents:
            raise CheckpointError(
                f"Output {where!r} would replace the checkpoint {os.fspath(source)!r} (the "
                "output folder is replaced as a whole); write to another folder, e.g. "
                f"{os.fspath(checkpoint.with_name(checkpoint.name + '-onnx'))!r}."
            )
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_NAME).is_file():
        raise CheckpointError(
            f"Output {where!r} already holds files that this exporter did not write (it has "
            f"no {MANIFEST_NAME}); the output folder is replaced as a whole, so name a new or "
            "empty folder."
        )


def replace_folder(staged: pathlib.Path, out: pathlib.Path) -> None:
    """Move ``staged`` to ``out``; an earlier ``out`` is replaced only once all is written."""
    if not out.exists():
        staged.rename(out)
        return
    if not out.is_dir():
        raise CheckpointError(f"Output {os.fspath(out)!r} exists and is not a folder.")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.rename(old)
    try:
        staged.rename(out)
    except OSError:
        old.rename(out)  # put the earlier folder back
        raise
    shutil.rmtree(old, ignore_errors=True)
