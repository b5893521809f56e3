"""``OnnxModule``: run an exported model like the PyTorch model, with onnxruntime only.

``onnxruntime`` is imported when a module is created, not when the package is imported.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._build import flat_input_names, flat_output_names
from ._dtypes import ORT_TYPES
from ._errors import InputStructureError
from ._iobinding import CudaIOBinding
from ._ortvalues import OrtValueRunner, needs_ortvalues
from ._pipeline import InputAdapter, OutputAdapter
from ._session_checks import (
    check_spec_fits_session,
    model_run_error,
    open_session,
    quiet_run_options,
    read_spec,
    resolve_providers,
)
from ._spec import AdapterSpec, LeafSpec, TensorSpec
from ._tensor_checks import CheckTensors
from ._torch import torch_module
from ._torch_convert import numpy_to_torch, torch_to_numpy

__all__ = ["OnnxModule", "load"]

_NDARRAY = np.ndarray


class OnnxModule:
    """An ONNX model called with the PyTorch model's nested inputs, returning nested outputs.

    numpy arrays in give numpy arrays out; torch tensors in give torch tensors out (on the
    inputs' device). With ``CUDAExecutionProvider`` and torch CUDA tensors the data stays on
    the GPU (IOBinding). Without a spec in the file (and none passed) the module runs in flat
    mode: arrays in graph input order (or by input name), a list of arrays out.

    Args:
        model: Path to a ``.onnx`` file, or its bytes.
        spec: The adapter spec; ``None`` reads it from the model's ``metadata_props`` (key
            :data:`~adapters.METADATA_KEY`) through onnxruntime alone.
        providers: Execution providers: ``"cpu"``, ``"cuda"``, or onnxruntime names. An
            unavailable one is skipped with a warning; CPU is always last. Default: CPU.
        session_options: ``onnxruntime.SessionOptions`` for the session.
        allowed_classes: Classes that outputs may be rebuilt as (namedtuples, dataclasses,
            ``ModelOutput`` subclasses), matched by ``module.qualname``; others come back as
            ``dict``. Nothing is ever imported from a name in the file.
        upcast: Narrow float dtypes to compute in float32 instead: ``["bfloat16"]``,
            ``["float16"]`` or both. ONNX Runtime's CPU provider lacks bfloat16 kernels for
            most ops; with this the model's weights and arithmetic become float32 in memory
            (the file is unchanged) while its inputs and outputs keep their dtypes. Results
            may differ from a bfloat16 computation by an ulp or two of bfloat16.

    Raises:
        ModelNotFoundError: ``model`` is a path where there is no file.
        InvalidModelError: The file or bytes are no ONNX model (empty, truncated, other).
        MissingKernelError: ONNX Runtime has no kernel for an op with its dtype (e.g. a
            bfloat16 ``Gemm`` on CPU); the message names the dtype, the ops and the
            ways out.
        AdapterSpecError: The spec is malformed or does not fit the model's inputs/outputs.

    Example:
        >>> import numpy as np, onnx
        >>> from onnx import helper, TensorProto
        >>> from onnx_export.adapters import build_adapter_spec
        >>> x = np.ones(2, np.float32)
        >>> spec = build_adapter_spec(None, ({"a": x},), {}, [x])
        >>> graph = helper.make_graph(
        ...     [helper.make_node("Neg", ["args.0.a"], ["output.0"])], "g",
        ...     [helper.make_tensor_value_info("args.0.a", TensorProto.FLOAT, [2])],
        ...     [helper.make_tensor_value_info("output.0", TensorProto.FLOAT, [2])])
        >>> opset = [helper.make_opsetid("", 21)]
        >>> model = helper.make_model(graph, opset_imports=opset, ir_version=10)
        >>> module = OnnxModule(model.SerializeToString(), spec)
        >>> module({"a": np.array([1, 2], np.float32)})
        [array([-1., -2.], dtype=float32)]
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | bytes,
        spec: AdapterSpec | None = None,
        *,
        providers: Sequence[str] | None = None,
        session_options: Any = None,
        allowed_classes: Sequence[type] = (),
        upcast: Sequence[str] = (),
    ) -> None:
        ort = importlib.import_module("onnxruntime")
        resolved = resolve_providers(
            providers, ort.get_available_providers(), ort.get_all_providers()
        )
        upcast = [upcast] if isinstance(upcast, str) else list(upcast)
        self._session = open_session(ort, model, session_options, resolved, upcast)
        self._run_options = quiet_run_options(ort)
        self._upcast = tuple(upcast)
        self._spec = spec if spec is not None else read_spec(self._session)
        self._input_adapter: InputAdapter | None = None
        self._output_adapter: OutputAdapter | None = None
        self._iobinding: CudaIOBinding | None = None
        self._ortvalues: OrtValueRunner | None = None
        self._flat_checks: CheckTensors | None = None
        if self._spec is None:
            self._input_names = [a.name for a in self._session.get_inputs()]
            self._output_names = [a.name for a in self._session.get_outputs()]
            self._ortvalues = _flat_ortvalues(ort, self._session)
            self._flat_checks = _flat_checks(self._session)
            return
        check_spec_fits_session(self._spec, self._session)
        self._input_adapter = InputAdapter(self._spec)
        self._output_adapter = OutputAdapter(self._spec, allowed_classes)
        self._input_names = flat_input_names(self._spec)
        self._output_names = flat_output_names(self._spec)
        self._iobinding, self._ortvalues = self._make_runners(ort, self._spec)

    @property
    def spec(self) -> AdapterSpec | None:
        """The adapter spec, or ``None`` in flat mode."""
        return self._spec

    def _narrow_inputs(self, spec: AdapterSpec) -> None:
        """Check inputs against ``spec``: the same leaves, with ranges the export narrowed.

        The session and the outputs stay as they are (the export pins an axis it proved
        only at the example's size without opening the session again).
        """
        self._spec = spec
        self._input_adapter = InputAdapter(spec)

    @property
    def input_names(self) -> list[str]:
        """The ONNX graph input names, in the order the adapter produces them."""
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        """The ONNX graph output names, in the order the adapter consumes them."""
        return list(self._output_names)

    @property
    def providers(self) -> list[str]:
        """The execution providers the session uses, in priority order."""
        return list(self._session.get_providers())

    @property
    def session(self) -> Any:
        """The underlying ``onnxruntime.InferenceSession``."""
        return self._session

    def __repr__(self) -> str:
        if self._spec is None:
            inputs = [describe_arg(a) for a in self._session.get_inputs()]
        else:
            inputs = [describe_leaf(leaf) for leaf in self._spec.inputs]
        outputs = [describe_arg(a) for a in self._session.get_outputs()]
        upcast = f", upcast={list(self._upcast)}" if self._upcast else ""
        return (
            f"OnnxModule(inputs={short_list(inputs)}, outputs={short_list(outputs)}, "
            f"providers={self.providers}{upcast})"
        )

    def __call__(self, *args: object, **kwargs: object) -> object:
        """Run the model on inputs shaped like the PyTorch model's; return its outputs.

        Raises:
            InputError: Subclasses name the input by path and say what was expected.
        """
        if self._input_adapter is None or self._output_adapter is None:
            return self._call_flat(args, kwargs)
        arrays = self._input_adapter(*args, **kwargs)
        try:
            if self._ortvalues is None:
                for array in arrays:
                    if type(array) is not _NDARRAY:
                        break
                else:  # plain numpy arrays: straight to the session
                    feed = dict(zip(self._input_names, arrays))  # noqa: B905  # same length; strict= is slow
                    outputs = self._session.run(self._output_names, feed, self._run_options)
                    return self._output_adapter(outputs)
            outputs = self._run_general(arrays)
        except Exception as e:
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            raise model_run_error(e, self._input_names, arrays) from e
        return self._output_adapter(outputs)

    def call_by_graph_names(self, arrays: Mapping[str, object]) -> object:
        """Run on one array per graph input name; return the outputs, rebuilt.

        The adapter's checks of each leaf still apply (constants keep their recorded
        values, dtypes, shapes, ranges, relations between dimensions), but the nested
        call is not rebuilt, so inputs whose containers are the model's own classes
        (namedtuples, dataclasses) need no import. ``onnx-export run`` calls this.

        Args:
            arrays: Arrays keyed by graph input name (``"pair.left"``); every graph
                input must be there.

        Raises:
            InputStructureError: A graph input has no array, or a name is unknown.
            InputError: Subclasses name the input and say what was expected.
        """
        if self._spec is None or self._input_adapter is None or self._output_adapter is None:
            return self._call_flat((), dict(arrays))
        names = [leaf.tensor.name for leaf in self._spec.inputs if leaf.tensor is not None]
        missing = [n for n in names if n not in arrays]
        unknown = [n for n in arrays if n not in names]
        if missing or unknown:
            raise InputStructureError(
                f"inputs: expected one array per graph input {names}, got none for {missing}"
                + (f" and arrays {unknown} that are no graph input" if unknown else "")
                + ". Key the arrays by graph input name (onnx-export info lists them)."
            )
        leaves = [
            arrays[leaf.tensor.name] if leaf.tensor is not None else leaf.value
            for leaf in self._spec.inputs
        ]
        flat = self._input_adapter.adapt_leaves(leaves)
        try:
            outputs = self._run_general(flat)
        except Exception as e:
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            raise model_run_error(e, self._input_names, flat) from e
        return self._output_adapter(outputs)

    def _run_flat(self, arrays: list[object]) -> list[object]:
        """Run on the graph's flat inputs (the input adapter's result); flat outputs."""
        return self._run_general(arrays)

    def _run_general(self, arrays: list[object]) -> list[object]:
        """Run any inputs: torch tensors, ndarray subclasses, dtypes that need ``OrtValue`` s.

        With torch tensors among the inputs, outputs become torch tensors on their device.
        """
        torch = torch_module()
        tensors = [a for a in arrays if torch is not None and isinstance(a, torch.Tensor)]
        if not tensors:
            return list(self._run_numpy([np.asarray(a) for a in arrays]))
        device = tensors[0].device
        if self._iobinding is not None and device.type == "cuda":
            return self._iobinding.run(arrays)
        outputs = self._run_numpy([torch_to_numpy(a) for a in arrays])
        return [numpy_to_torch(o, device) for o in outputs]

    def _run_numpy(self, arrays: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        if self._ortvalues is not None:
            return self._ortvalues.run(arrays)
        feed = dict(zip(self._input_names, arrays, strict=True))
        return list(self._session.run(self._output_names, feed, self._run_options))

    def _call_flat(self, args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
        names = self._input_names
        if len(args) > len(names) or any(k not in names[len(args) :] for k in kwargs):
            raise InputStructureError(
                f"inputs: expected the graph inputs {names} (by position or name), got "
                f"{len(args)} positional and names {list(kwargs)}. This model has no adapter "
                "metadata, so pass flat arrays in graph input order."
            )
        feed = dict(zip(names, args, strict=False)) | kwargs
        missing = [n for n in names if n not in feed]
        if missing:
            raise InputStructureError(
                f"inputs: expected a value for every graph input {names}, got none for "
                f"{missing}. Pass one array per graph input."
            )
        arrays = [feed[n] for n in names]
        if self._flat_checks is not None:
            self._flat_checks(arrays)
        try:
            if all(type(a) is np.ndarray for a in arrays):
                return list(self._session.run(self._output_names, feed, self._run_options))
            return self._run_general(arrays)
        except Exception as e:
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            raise model_run_error(e, names, arrays, checked="dtypes, ranks and fixed sizes") from e

    def _make_runners(
        self, ort: Any, spec: AdapterSpec
    ) -> tuple[CudaIOBinding | None, OrtValueRunner | None]:
        """Build the special runners: IOBinding (CUDA), OrtValues (dtypes numpy lacks).

        Each is ``None`` when this spec and session do not need it.
        """
        inputs = [leaf.tensor for leaf in spec.inputs if leaf.tensor is not None]
        outputs = [leaf.tensor for leaf in spec.outputs if leaf.tensor is not None]
        on_cuda = "CUDAExecutionProvider" in self._session.get_providers()
        iobinding = None
        if on_cuda and CudaIOBinding.supports(inputs, outputs):
            iobinding = CudaIOBinding(self._session, inputs, outputs)
        ortvalues = None
        if needs_ortvalues([*inputs, *outputs]):
            ortvalues = OrtValueRunner(ort, self._session, inputs, outputs)
        return iobinding, ortvalues


def _flat_checks(session: Any) -> CheckTensors | None:
    """The dtype, rank and fixed-size checks of a file without adapter metadata.

    Taken from the graph's declared inputs. Symbolic sizes are not tied across inputs
    (another producer may reuse a name loosely); ``None`` when an input's dtype is one
    the checks do not know.
    """
    names = {v: k for k, v in ORT_TYPES.items()}
    inputs = session.get_inputs()
    if any(a.type not in names for a in inputs):
        return None
    seen: dict[str, int] = {}
    for a in inputs:
        for d in a.shape:
            if isinstance(d, str) and d:
                seen[d] = seen.get(d, 0) + 1
    leaves = []
    for a in inputs:
        shape: list[int | str] = []
        for axis, d in enumerate(a.shape):
            named = isinstance(d, str) and bool(d) and seen[d] == 1
            if (isinstance(d, int) and d >= 0) or named:
                shape.append(d)
            else:  # unnamed, or a name other inputs share: any size
                shape.append(f"{d or 'dim'}@{a.name}[{axis}]")
        leaves.append(LeafSpec(a.name, "tensor", TensorSpec(a.name, names[a.type], tuple(shape))))
    return CheckTensors(leaves)


def _flat_ortvalues(ort: Any, session: Any) -> OrtValueRunner | None:
    """An ``OrtValue`` runner for a model without a spec, when its dtypes need one."""
    names = {v: k for k, v in ORT_TYPES.items()}
    inputs = [TensorSpec(a.name, names.get(a.type, "float32"), ()) for a in session.get_inputs()]
    outputs = [TensorSpec(a.name, names.get(a.type, "float32"), ()) for a in session.get_outputs()]
    if not needs_ortvalues([*inputs, *outputs]):
        return None
    return OrtValueRunner(ort, session, inputs, outputs)


def shape_text(shape: Any) -> str:
    if not isinstance(shape, (list, tuple)):
        return "?"
    return (
        "("
        + ", ".join("?" if d is None else str(d) for d in shape)
        + ("," if len(shape) == 1 else "")
        + ")"
    )


def describe_arg(arg: Any) -> str:
    names = {v: k for k, v in ORT_TYPES.items()}
    dtype = names.get(arg.type, str(arg.type).removeprefix("tensor(").removesuffix(")"))
    return f"{arg.name}: {dtype}{shape_text(arg.shape)}"


def describe_leaf(leaf: Any) -> str:
    if leaf.tensor is None:
        return f"{leaf.path}={leaf.value!r}"
    return f"{leaf.path}: {leaf.tensor.dtype}{shape_text(list(leaf.tensor.shape))}"


def short_list(items: list[str], limit: int = 6) -> str:
    """``[a, b, ...]``, at most ``limit`` items and a count of the rest."""
    shown = (
        items
        if len(items) <= limit
        else [*items[: limit - 1], f"... {len(items) - limit + 1} more"]
    )
    return "[" + ", ".join(shown) + "]"


def load(
    path: str | os.PathLike[str],
    *,
    providers: Sequence[str] | None = None,
    session_options: Any = None,
    allowed_classes: Sequence[type] = (),
    upcast: Sequence[str] = (),
) -> OnnxModule:
    """Load a saved model with its adapter spec (from ``metadata_props``), ready to call.

    Args:
        path: The ``.onnx`` file (external data next to it is found by onnxruntime).
        providers: See :class:`OnnxModule`.
        session_options: See :class:`OnnxModule`.
        allowed_classes: See :class:`OnnxModule`.
        upcast: See :class:`OnnxModule` (``["bfloat16"]`` runs a bfloat16 model on CPU).

    Returns:
        The module; in flat mode if the file has no adapter metadata.

    Raises:
        ModelNotFoundError: No file at ``path`` (a ``FileNotFoundError``).
        InvalidModelError: The file is no ONNX model (empty, truncated, another kind).
        MissingKernelError: ONNX Runtime has no kernel for an op with its dtype.
        AdapterSpecError: The metadata is malformed or does not fit the model.

    Example:
        >>> from onnx_export import adapters
        >>> module = adapters.load("model.onnx", providers=["cuda"])  # doctest: +SKIP
        >>> outputs = module(input_ids=ids, attention_mask=mask)  # doctest: +SKIP
    """
    return OnnxModule(
        path,
        providers=providers,
        session_options=session_options,
        allowed_classes=allowed_classes,
        upcast=upcast,
    )
