"""The runtime of the single-graph tasks: inputs by name in, outputs by name out.

numpy and onnxruntime only (no torch, no transformers): each ``OrtModelFor<Task>`` loads
``model.onnx`` from a folder :func:`onnx_export.hf.export_pretrained` wrote, takes the
inputs transformers' model takes (as numpy arrays or nested lists) and returns a
:class:`ModelOutput` whose fields are named as transformers names them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._pretrained import ExportedFolder, read_exported_folder

__all__ = ["ModelOutput", "OrtModel"]

_DTYPES = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(bool)": np.bool_,
}


class ModelOutput(Mapping[str, Any]):
    """A model's outputs by name, readable as ``out.logits`` or ``out["logits"]``.

    Example:
        >>> import numpy as np
        >>> from onnx_export.hf import ModelOutput
        >>> out = ModelOutput({"logits": np.zeros((1, 2))})
        >>> out.logits.shape, list(out)
        ((1, 2), ['logits'])
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(
                f"this output has no {name!r}; it has {', '.join(self._values)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}={getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
            for k, v in self._values.items()
        )
        return f"ModelOutput({fields})"


def _providers(providers: Sequence[str] | None) -> list[str]:
    names = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
    return [names.get(p, p) for p in (providers or ("cpu",))]


class OrtModel:
    """One exported ``model.onnx`` run with onnxruntime; subclasses name the task.

    Attributes:
        folder: The exported folder's manifest and configs.
        session: The ``onnxruntime.InferenceSession``.
        input_names: The graph's inputs, in order.
        output_names: The graph's outputs, in order.

    Example:
        >>> from onnx_export import hf
        >>> model = hf.OrtModelForSequenceClassification.from_pretrained("out")  # doctest: +SKIP
        >>> model  # doctest: +SKIP
        OrtModelForSequenceClassification(bert, task='text-classification', inputs=(input_ids,
        attention_mask, token_type_ids), outputs=(logits), folder='out')
        >>> model(input_ids=[[5, 6, 7]]).logits.shape  # doctest: +SKIP
        (1, 3)
    """

    #: The manifest tasks this class runs.
    tasks: ClassVar[tuple[str, ...]] = ()

    def __init__(self, folder: ExportedFolder, session: Any) -> None:
        self.folder = folder
        self.session = session
        self.input_names = tuple(i.name for i in session.get_inputs())
        self.output_names = tuple(o.name for o in session.get_outputs())
        self._dtypes = {i.name: _DTYPES.get(i.type, np.float32) for i in session.get_inputs()}
        self._shapes = {i.name: tuple(i.shape) for i in session.get_inputs()}

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
    ) -> Any:
        """Load the folder :func:`onnx_export.hf.export_pretrained` wrote for this task.

        Args:
            path: The exported folder.
            providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names; CPU when
                ``None``.
            session_options: An ``onnxruntime.SessionOptions`` (threads, ...).

        Returns:
            The model, ready to call.

        Raises:
            CheckpointError: The folder lacks its manifest or model, or holds another task.
        """
        import onnxruntime as ort

        folder = read_exported_folder(path, cls.tasks)
        session = ort.InferenceSession(
            os.fspath(folder.path / "model.onnx"),
            sess_options=session_options,
            providers=_providers(providers),
        )
        return cls(folder, session)

    @property
    def config(self) -> Mapping[str, Any]:
        """The exported folder's ``config.json``."""
        return self.folder.config

    def _default(self, name: str, given: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """A value for an input left out: all-ones masks, zero token types."""
        ids = given.get("input_ids")
        if ids is None:
            return None
        if name == "attention_mask":
            return np.ones(ids.shape, dtype=self._dtypes[name])
        if name == "token_type_ids":
            return np.zeros(ids.shape, dtype=self._dtypes[name])
        return None

    def run(self, *args: Any, **inputs: Any) -> ModelOutput:
        """Run the graph on ``inputs`` (by name; ``None`` values are left out).

        Positional arguments are the graph's inputs in order, as transformers' ``forward``
        takes them (``model(input_ids, attention_mask)``).
        """
        inputs = self._by_name(args, inputs)
        unknown = sorted(k for k, v in inputs.items() if v is not None and k not in self._dtypes)
        if unknown:
            raise GenerationError(
                f"{type(self).__name__} takes {', '.join(self.input_names)}; got {unknown}."
            )
        given = {k: self._array(k, v) for k, v in inputs.items() if v is not None}
        feed = {}
        for name in self.input_names:
            value = given[name] if name in given else self._default(name, given)
            if value is None:
                raise GenerationError(
                    f"{type(self).__name__} needs {name}=... (it takes "
                    f"{', '.join(self.input_names)})."
                )
            feed[name] = value
        try:
            outputs = self.session.run(None, feed)
        except Exception as e:
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in feed.items())
            reason = " ".join(str(e).split())
            raise GenerationError(
                f"ONNX Runtime could not run {os.fspath(self.folder.path)}/model.onnx on "
                f"{shapes}: {reason}"
            ) from e
        return ModelOutput(dict(zip(self.output_names, outputs, strict=True)))

    def _array(self, name: str, value: Any) -> np.ndarray:
        """``value`` as the graph input ``name`` takes it: its dtype, rank and fixed sizes.

        Refused with a :class:`GenerationError` rather than left to ONNX Runtime: ragged
        rows, floats where the graph takes integers (they would be truncated), another
        rank, another fixed size, and token ids outside the vocabulary.
        """
        try:
            array = np.asarray(value)
        except ValueError as e:
            raise GenerationError(
                f"{name}: expected a rectangular array, got rows of different lengths; pad "
                "them to one length (attention_mask 0 on the padding)."
            ) from e
        if array.dtype == object:
            raise GenerationError(
                f"{name}: expected a rectangular array of numbers, got {type(value).__name__} "
                "items numpy cannot stack; pad the rows to one length."
            )
        want = np.dtype(self._dtypes[name])
        if want.kind in "iu" and array.dtype.kind in "fc":
            raise GenerationError(
                f"{name}: expected integers ({want.name}), got {array.dtype.name} values; "
                "pass token ids and masks as ints (a float would be truncated)."
            )
        shape = self._shapes[name]
        dims = "[" + ", ".join(str(d) for d in shape) + "]"
        if array.ndim != len(shape):
            hint = (
                " (one sequence: wrap it in a list, [[...]])"
                if array.ndim + 1 == len(shape)
                else ""
            )
            raise GenerationError(
                f"{name}: expected {len(shape)} dimensions {dims}, got shape "
                f"{tuple(array.shape)}{hint}."
            )
        for axis, (size, got) in enumerate(zip(shape, array.shape, strict=True)):
            if isinstance(size, int) and size != got:
                raise GenerationError(
                    f"{name}: expected size {size} at axis {axis} ({dims}, fixed at export), "
                    f"got shape {tuple(array.shape)}."
                )
        vocab = self.folder.config.get("vocab_size")
        if name == "input_ids" and isinstance(vocab, int) and array.size:
            bad = np.unique(array[(array < 0) | (array >= vocab)])
            if bad.size:
                raise GenerationError(
                    f"input_ids holds token ids {bad[:8].tolist()} outside the model's "
                    f"vocabulary [0, {vocab}): pass ids from this model's tokenizer."
                )
        return array.astype(want, copy=False)

    def __call__(self, *args: Any, **inputs: Any) -> ModelOutput:
        """Run the model: the inputs transformers' model takes, its outputs by name.

        ``model(ids)`` and ``model(input_ids=ids)`` are the same call: positional arguments
        are the graph's inputs in order (``input_ids``, ``attention_mask``, ...).
        """
        return self.run(*args, **inputs)

    def _by_name(self, args: tuple[Any, ...], inputs: dict[str, Any]) -> dict[str, Any]:
        """Positional arguments named after the graph's inputs, in order."""
        if not args:
            return inputs
        if len(args) > len(self.input_names):
            raise GenerationError(
                f"{type(self).__name__} takes at most {len(self.input_names)} inputs "
                f"({', '.join(self.input_names)}); got {len(args)} positional arguments."
            )
        named = dict(zip(self.input_names, args, strict=False))
        twice = sorted(set(named) & set(inputs))
        if twice:
            raise GenerationError(
                f"{type(self).__name__} got {', '.join(twice)} both by position and by "
                f"name: pass each input once (positions follow {', '.join(self.input_names)})."
            )
        return {**named, **inputs}

    def __repr__(self) -> str:
        model_type = self.folder.config.get("model_type", "?")
        return (
            f"{type(self).__name__}({model_type}, task={self.folder.task!r}, "
            f"inputs=({', '.join(self.input_names)}), "
            f"outputs=({', '.join(self.output_names)}), folder={os.fspath(self.folder.path)!r})"
        )
