"""What an exported folder says about generation: the task, token ids, limits, defaults."""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import pathlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from onnx_export.hf._errors import CheckpointError, GenerationError
from onnx_export.hf.runtime.generation._logits import TokenChooser

__all__ = ["ExportedFolder", "read_exported_folder", "token_ids"]

_MANIFEST = "onnx_export.json"

# generation_config.json fields the runtime does not implement: a warning names them when
# they are set, because greedy tokens would then differ from transformers' generate().
_IGNORED_DEFAULTS: Mapping[str, Any] = {
    "num_beams": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_decoder_ids": None,
    "sequence_bias": None,
    "min_p": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "exponential_decay_length_penalty": None,
}


@dataclasses.dataclass(frozen=True)
class ExportedFolder:
    """An exported folder's manifest, config and generation config, read."""

    path: pathlib.Path
    task: str
    onnx_files: tuple[str, ...]
    config: Mapping[str, Any]
    generation: Mapping[str, Any]

    def setting(self, name: str) -> Any:
        """``name`` from generation_config.json, else from config.json, else ``None``."""
        value = self.generation.get(name)
        return self.config.get(name) if value is None else value

    def max_positions(self, *names: str) -> int | None:
        """The first of ``names`` set in config.json (a model's position limit)."""
        for name in names:
            value = self.config.get(name)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def chooser(
        self, *, do_sample: bool, temperature: float, top_k: int | None, top_p: float | None
    ) -> TokenChooser:
        """The token chooser with this folder's suppressed and forced tokens."""
        forced_eos = self.setting("forced_eos_token_id")
        return TokenChooser(
            do_sample=do_sample,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            suppress_tokens=tuple(self.generation.get("suppress_tokens") or ()),
            begin_suppress_tokens=tuple(self.generation.get("begin_suppress_tokens") or ()),
            forced_bos_token_id=self.setting("forced_bos_token_id"),
            forced_eos_token_id=token_ids(forced_eos),
        )


def _read_json(path: pathlib.Path, *, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(
                f"{os.fspath(path)!r} is missing: give the folder that "
                "onnx_export.hf.export_pretrained (or `onnx-export hf`) wrote."
            )
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{os.fspath(path)!r} is not readable JSON: {e}.") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{os.fspath(path)!r} holds {type(data).__name__}, not an object.")
    return data


# What OrtModelForCausalLM.generate() implements (and reads from generation_config.json).
_CAUSAL_IMPLEMENTED = frozenset(
    {"num_beams", "repetition_penalty", "no_repeat_ngram_size", "bad_words_ids"}
    | {"min_length", "min_new_tokens"}
)


def _warn_ignored(generation: Mapping[str, Any], path: pathlib.Path, task: str) -> None:
    implemented = _CAUSAL_IMPLEMENTED if task == "text-generation" else frozenset()
    set_fields = {
        k: generation[k]
        for k, default in _IGNORED_DEFAULTS.items()
        if generation.get(k) is not None and generation.get(k) != default and k not in implemented
    }
    if set_fields:
        warnings.warn(
            f"{os.fspath(path)!r} sets {set_fields}, which onnx_export.hf's generate() does "
            "not implement for this task; its tokens will differ from transformers' generate().",
            UserWarning,
            stacklevel=4,
        )


def read_exported_folder(path: str | os.PathLike[str], tasks: Sequence[str]) -> ExportedFolder:
    """Read an exported folder and check that its task is one of ``tasks``."""
    folder = pathlib.Path(path)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise CheckpointError(
            f"Exported folder {os.fspath(path)!r} {what}: give the folder that "
            "onnx_export.hf.export_pretrained (or `onnx-export hf`) wrote."
        )
    manifest = _read_json(folder / _MANIFEST, required=True)
    task = str(manifest.get("task"))
    if task not in tasks:
        raise CheckpointError(
            f"{os.fspath(folder / _MANIFEST)!r} says task {task!r}; this class runs "
            f"{', '.join(tasks)}. Use the class for that task."
        )
    generation = _read_json(folder / "generation_config.json", required=False)
    _warn_ignored(generation, folder / "generation_config.json", task)
    return ExportedFolder(
        path=folder,
        task=task,
        onnx_files=tuple(str(f) for f in manifest.get("onnx_files", ())),
        config=_read_json(folder / "config.json", required=True),
        generation=generation,
    )


def token_ids(value: Any) -> tuple[int, ...]:
    """An id or a list of ids (as configs write them) as a tuple; ``None`` -> ``()``."""
    if value is None:
        return ()
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise GenerationError(f"expected a token id or a list of token ids, got {value!r}.")
    ids = list(value)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in ids):
        raise GenerationError(f"expected a token id or a list of token ids, got {value!r}.")
    return tuple(int(v) for v in ids)


def check_length(what: str, length: int, limit: int | None, advice: str) -> None:
    """``GenerationError`` when ``length`` passes the model's position ``limit``."""
    if limit is not None and length > limit:
        raise GenerationError(f"{what} is {length}, over the model's {limit} positions. {advice}")
