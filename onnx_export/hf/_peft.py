"""A PEFT LoRA adapter folder read with numpy: which modules, their A and scaled B.

PEFT's ``save_pretrained`` writes ``adapter_config.json`` and ``adapter_model.safetensors``
whose keys are ``base_model.model.<module path>.lora_A.weight`` (rank, in features) and
``...lora_B.weight`` (out features, rank). The module path is the one inside the
``transformers`` model (``model.layers.0.self_attn.q_proj``). The adapter adds
``scaling * B @ A @ x`` to the module's output, ``scaling = lora_alpha / r`` (``/ sqrt(r)``
with rsLoRA), per module when ``rank_pattern`` / ``alpha_pattern`` say so: the scaling is
folded into B here, so a graph computes ``(x @ A^T) @ B^T`` and nothing else.

Both sides read adapters with this module: the export (``lora=ADAPTER_DIR`` takes the
target modules from it) and the torch-free runtime (``load_adapter``). Anything more than
a low-rank update of Linear layers is refused with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import AdapterError
from onnx_export.hf._safetensors import read_safetensors

__all__ = ["LoraAdapter", "read_lora_adapter", "CONFIG_NAME", "WEIGHTS_NAME"]

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"

_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<side>[AB])(?:\.[^.]+)?\.weight$"
)

_MERGE = "merge it into the checkpoint (PEFT's merge_and_unload) and export that instead"

#: adapter_config.json settings that change the forward beyond ``B @ A``: (value that is
#: fine, why another value is refused).
_REFUSED: Mapping[str, tuple[Any, str]] = {
    "use_dora": (False, "DoRA rescales each weight column by a magnitude vector"),
    "bias": ("none", "the adapter trains biases of the base model"),
    "lora_bias": (False, "the adapter adds a bias to lora_B"),
    "modules_to_save": (None, "the adapter replaces whole modules (modules_to_save)"),
    "trainable_token_indices": (None, "the adapter trains rows of the token embeddings"),
    "layer_replication": (None, "the adapter duplicates layers of the base model"),
    "target_parameters": (None, "the adapter targets parameters, not Linear modules"),
    "fan_in_fan_out": (False, "the adapter targets Conv1D layers (GPT-2's), not nn.Linear"),
    "use_qalora": (False, "QA-LoRA pools the inputs before lora_A"),
    "use_bdlora": (None, "BD-LoRA's block-diagonal factors"),
    "alora_invocation_tokens": (None, "activated LoRA applies only after invocation tokens"),
    "arrow_config": (None, "Arrow routes among several adapters per token"),
    "megatron_config": (None, "Megatron's parallel layers are not nn.Linear"),
    "velora_config": (None, "VeLoRA compresses activations in its forward"),
    "monteclora_config": (None, "MonteCLoRA samples its update"),
    "kasa_config": (None, "KaSA adds a singular-value gate between A and B"),
}


@dataclasses.dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter's low-rank factors, by module path, the scaling folded into B.

    Attributes:
        path: The adapter folder.
        weights: Module path (``model.layers.0.self_attn.q_proj``) -> ``(A, B)``, float32:
            A is (rank, in features), B (out features, rank) already times the scaling.
        rank: The largest rank among the modules.
    """

    path: pathlib.Path
    weights: Mapping[str, tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]
    rank: int

    @property
    def target_names(self) -> tuple[str, ...]:
        """The modules' own names (``q_proj``, ``v_proj``), as ``target_modules`` lists them."""
        return tuple(sorted({path.rpartition(".")[2] for path in self.weights}))


def _read_config(folder: pathlib.Path) -> dict[str, Any]:
    file = folder / CONFIG_NAME
    if not file.is_file():
        raise AdapterError(
            f"{os.fspath(folder)!r} has no {CONFIG_NAME}: give the folder PEFT's "
            f"save_pretrained wrote ({CONFIG_NAME} and {WEIGHTS_NAME})."
        )
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AdapterError(f"{os.fspath(file)!r} is not readable JSON: {e}.") from e
    if not isinstance(config, dict):
        raise AdapterError(f"{os.fspath(file)!r} holds {type(config).__name__}, not an object.")
    return config


def _check_config(config: Mapping[str, Any], where: str) -> None:
    kind = str(config.get("peft_type", "")).upper()
    if kind != "LORA":
        raise AdapterError(
            f"{where} is a {config.get('peft_type')!r} adapter; only LoRA adapters "
            f"(peft_type 'LORA') are low-rank updates the exported graph can take. To use it, "
            f"{_MERGE}."
        )
    for name, (fine, why) in _REFUSED.items():
        value = config.get(name)
        if value is not None and value is not False and value != fine and value not in ({}, []):
            raise AdapterError(
                f"{where} sets {name}={value!r}: {why}, which is more than the low-rank "
                f"update B @ A the exported graph adds. To use this adapter, {_MERGE}."
            )


def _pattern(patterns: Mapping[str, Any], module: str, default: Any) -> Any:
    """``rank_pattern``/``alpha_pattern``'s value for ``module`` (PEFT's matching rule).

    The first key that matches the end of the module path, at a dot, gives the value.
    """
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return value
    return default


def _scaling(config: Mapping[str, Any], module: str, rank: int) -> float:
    alpha = float(_pattern(config.get("alpha_pattern") or {}, module, config.get("lora_alpha", 8)))
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _factors(
    tensors: Mapping[str, npt.NDArray[Any]], where: str
) -> dict[str, dict[str, npt.NDArray[Any]]]:
    """The A and B of each module, by module path; a key that is neither is refused."""
    found: dict[str, dict[str, npt.NDArray[Any]]] = {}
    for key, value in tensors.items():
        match = _KEY.match(key)
        if match is None:
            kind = "DoRA's magnitude vector" if "magnitude" in key else "not a Linear's lora_A/B"
            raise AdapterError(
                f"{where} holds {key!r} ({kind}); the exported graph takes the lora_A and "
                f"lora_B of Linear layers only. To use this adapter, {_MERGE}."
            )
        found.setdefault(match["module"], {})[match["side"]] = value
    return found


def _module_weights(
    module: str, pair: Mapping[str, npt.NDArray[Any]], config: Mapping[str, Any], where: str
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    if set(pair) != {"A", "B"}:
        raise AdapterError(f"{where} has lora_{''.join(pair)} of {module!r} but not both A and B.")
    a, b = pair["A"], pair["B"]
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
        raise AdapterError(
            f"{where}: {module!r} has lora_A {list(a.shape)} and lora_B {list(b.shape)}; "
            "expected (rank, in features) and (out features, rank) of one rank."
        )
    scale = _scaling(config, module, int(a.shape[0]))
    return a.astype(np.float32), (b.astype(np.float64) * scale).astype(np.float32)


def read_lora_adapter(path: str | os.PathLike[str]) -> LoraAdapter:
    """Read a PEFT LoRA adapter folder: each module's A and scaled B, float32.

    Args:
        path: The folder PEFT's ``save_pretrained`` wrote (``adapter_config.json`` and
            ``adapter_model.safetensors``).

    Returns:
        The adapter's factors by module path.

    Raises:
        AdapterError: Not a folder, a file missing or damaged, an adapter that is not LoRA
            or is a variant beyond ``B @ A`` (DoRA, trained biases, ...), or factors whose
            shapes disagree.

    Example:
        >>> adapter = read_lora_adapter("my-adapter")  # doctest: +SKIP
        >>> adapter.target_names, adapter.rank  # doctest: +SKIP
        (('q_proj', 'v_proj'), 8)
    """
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise AdapterError(
            f"Adapter {os.fspath(path)!r} is not a folder; give the folder PEFT's "
            f"save_pretrained wrote ({CONFIG_NAME} and {WEIGHTS_NAME})."
        )
    where = f"Adapter {os.fspath(folder)!r}"
    config = _read_config(folder)
    _check_config(config, where)
    if not (folder / WEIGHTS_NAME).is_file():
        raise AdapterError(
            f"{where} has no {WEIGHTS_NAME} (an adapter_model.bin is not read: save the "
            "adapter with safe_serialization=True)."
        )
    factors = _factors(read_safetensors(folder / WEIGHTS_NAME), where)
    if not factors:
        raise AdapterError(f"{where}'s {WEIGHTS_NAME} holds no lora_A/lora_B weights.")
    weights = {m: _module_weights(m, pair, config, where) for m, pair in sorted(factors.items())}
    rank = max(int(a.shape[0]) for a, _ in weights.values())
    return LoraAdapter(folder, weights, rank)
