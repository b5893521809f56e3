"""LoRA adapters fed to a decoder exported with ``lora=``: loaded once, switched per call.

A decoder exported with ``export_pretrained(..., lora=[...])`` takes, for each target
Linear, ``lora.<module path>.A`` (rank, in) and ``lora.<module path>.B`` (out, rank) and
adds ``(x @ A^T) @ B^T`` to its output. An adapter is a set of such inputs: its factors
read from a PEFT folder (``hf/_peft.py``: the scaling is folded into B), each module's
zero-padded to the adapter's largest rank (a rank-pattern adapter mixes ranks), the
targets the adapter leaves out fed zeros. The base model is rank 0: empty factors, an
update of zeros. The inputs are made ``OrtValue``s on the session's device once, at load
time; a run feeds them as they are (:meth:`StepSession.with_inputs`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onnx_export.hf._errors import AdapterError
from onnx_export.hf._peft import LoraAdapter, read_lora_adapter
from onnx_export.hf.runtime._session import ONNX_TO_NUMPY, StepSession, Value

__all__ = ["AdapterSet", "LORA_PREFIX"]

#: The graph's LoRA inputs: ``lora.<module path>.A`` and ``.B`` (``hf/export/_lora.py``).
LORA_PREFIX = "lora."


_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16


def _bfloat16_bits(array: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """float32 values as bfloat16 bits, rounded to the nearest even (as torch rounds)."""
    bits = array.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _module_shapes(session: StepSession) -> dict[str, tuple[int, int]]:
    """Each LoRA target's module path -> (in features, out features), from the graph."""
    shapes: dict[str, tuple[int, int]] = {}
    for name in session.input_names:
        if name.startswith(LORA_PREFIX) and name.endswith(".A"):
            path = name[len(LORA_PREFIX) : -2]
            a = session.input_meta(name).shape
            b = session.input_meta(f"{LORA_PREFIX}{path}.B").shape
            shapes[path] = (int(a[1]), int(b[0]))
    return shapes


class AdapterSet:
    """The LoRA adapters loaded for one decoder session, by name.

    Attributes:
        modules: Each LoRA target's module path -> (in features, out features); empty
            for a graph exported without LoRA inputs.
    """

    def __init__(self, session: StepSession) -> None:
        self._session = session
        self.modules = _module_shapes(session)
        self._feeds: dict[str | None, dict[str, Value]] = {}
        if self.modules:
            self._feeds[None] = self._feed({}, 0)

    @property
    def names(self) -> tuple[str, ...]:
        """The loaded adapters' names, in load order."""
        return tuple(n for n in self._feeds if n is not None)

    def _feed(
        self,
        weights: Mapping[str, tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]],
        rank: int,
    ) -> dict[str, Value]:
        """Every LoRA input, as ORT values on the device: ``weights`` padded to ``rank``."""
        feed = {}
        for path, (inputs, outputs) in self.modules.items():
            a = np.zeros((rank, inputs), np.float32)
            b = np.zeros((outputs, rank), np.float32)
            if path in weights:
                given_a, given_b = weights[path]
                a[: given_a.shape[0]] = given_a
                b[:, : given_b.shape[1]] = given_b
            for side, array in (("A", a), ("B", b)):
                name = f"{LORA_PREFIX}{path}.{side}"
                feed[name] = self._owned(array, self._session.input_meta(name).type)
        return feed

    def _owned(self, array: npt.NDArray[np.float32], kind: str) -> Value:
        """``array`` in the input's type (``kind``), copied into memory onnxruntime owns.

        A half-precision export takes its factors in its dtype; bfloat16, which numpy
        lacks, goes in as its bits (rounded to nearest even).
        """
        element: Any = ONNX_TO_NUMPY.get(kind, np.float32)
        data = array.astype(element)
        if kind == "tensor(bfloat16)":
            element, data = _BFLOAT16, _bfloat16_bits(array)
        value = ort.OrtValue.ortvalue_from_shape_and_type(
            array.shape, element, self._session.device, 0
        )
        value.update_inplace(np.ascontiguousarray(data))
        return value._ortvalue

    def _placed(self, adapter: LoraAdapter) -> LoraAdapter:
        """``adapter`` with module paths of the exported model.

        An adapter trained on the bare backbone (``AutoModel``: ``layers.0...``) names its
        modules without the head class's prefix (``model.layers.0...``): a path that ends
        exactly one exported path at a dot is that path.
        """
        moved = {}
        for path, pair in adapter.weights.items():
            ends = [m for m in self.modules if m.endswith("." + path)]
            moved[ends[0] if path not in self.modules and len(ends) == 1 else path] = pair
        return dataclasses.replace(adapter, weights=moved)

    def _check(self, adapter: LoraAdapter) -> None:
        where = f"Adapter {os.fspath(adapter.path)!r}"
        if not self.modules:
            raise AdapterError(
                f"{where}: this model was exported without LoRA inputs; export it again with "
                f"export_pretrained(..., lora={list(adapter.target_names)!r}) (or `onnx-export "
                f"hf ... --lora {os.fspath(adapter.path)}`)."
            )
        unknown = sorted(set(adapter.weights) - set(self.modules))
        if unknown:
            exported = sorted({p.rpartition(".")[2] for p in self.modules})
            raise AdapterError(
                f"{where} adapts {', '.join(unknown[:3])}{' ...' if len(unknown) > 3 else ''}"
                f", which the export did not make LoRA targets (it has {', '.join(exported)} "
                f"in {len(self.modules)} modules); export again with lora="
                f"{sorted(set(exported) | set(adapter.target_names))!r}, or use an adapter "
                "of those modules."
            )
        for path, (a, b) in adapter.weights.items():
            inputs, outputs = self.modules[path]
            if a.shape[1] != inputs or b.shape[0] != outputs:
                raise AdapterError(
                    f"{where}: {path} is a Linear of {inputs} -> {outputs} features in the "
                    f"exported model, but the adapter's factors are for {a.shape[1]} -> "
                    f"{b.shape[0]} (lora_A {list(a.shape)}, lora_B {list(b.shape)}); it was "
                    "trained on another base model."
                )

    def load(self, path: str | os.PathLike[str], name: str) -> None:
        """Read, check and place on the device the adapter in the PEFT folder ``path``."""
        if not isinstance(name, str) or not name:
            raise AdapterError(f"An adapter's name must be a non-empty string, got {name!r}.")
        adapter = self._placed(read_lora_adapter(path))
        self._check(adapter)
        self._feeds[name] = self._feed(adapter.weights, adapter.rank)

    def unload(self, name: str) -> None:
        """Forget the adapter ``name``."""
        self.feed(name)  # an unknown name is refused with the names loaded
        del self._feeds[name]

    def feed(self, name: str | None) -> dict[str, Value]:
        """The LoRA inputs of adapter ``name`` (``None``: the base model, zeros)."""
        if name in self._feeds:
            return self._feeds[name]
        if name is None:  # a graph without LoRA inputs is the base model as it is
            return {}
        loaded = f"loaded: {', '.join(map(repr, self.names))}" if self.names else "none is loaded"
        raise AdapterError(
            f"No adapter named {name!r} ({loaded}); load it first with "
            "load_adapter(path, name=...), or pass adapter=None for the base model."
        )

    def session(self, base: StepSession, name: str | None) -> StepSession:
        """``base`` feeding adapter ``name``'s inputs (``None``: the base model)."""
        return base.with_inputs(self.feed(name)) if self.modules else base


def pop_adapter(settings: dict[str, Any]) -> tuple[bool, str | None]:
    """``(given, name)``: the ``adapter`` keyword of a call, taken out of ``settings``."""
    if "adapter" not in settings:
        return False, None
    name = settings.pop("adapter")
    if name is not None and not isinstance(name, str):
        raise AdapterError(
            f"adapter= takes the name given to load_adapter or None, got {type(name).__name__}."
        )
    return True, name
