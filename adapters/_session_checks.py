"""What ``OnnxModule`` checks and decides about its onnxruntime session.

Provider names are resolved (``"cuda"`` -> ``CUDAExecutionProvider``, falling back to CPU with
a warning), the spec is read from the model's metadata through onnxruntime alone, and the
spec is checked against the graph's inputs and outputs before any call.
"""

from __future__ import annotations

import os
import pathlib
import re
import warnings
from collections.abc import Sequence
from typing import Any

from ._dtypes import ORT_TYPES, onnx_value_dtype
from ._errors import InvalidModelError, MissingKernelError, ModelNotFoundError, ModelRunError
from ._iobinding import onnx_value_shape
from ._json import spec_error
from ._spec import METADATA_KEY, AdapterSpec, LeafSpec

__all__ = [
    "PROVIDER_ALIASES",
    "resolve_providers",
    "open_session",
    "read_spec",
    "check_spec_fits_session",
    "model_run_error",
]

PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "dml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
"""Short provider names accepted by :class:`~adapters.OnnxModule` (case-insensitive)."""

_CPU = "CPUExecutionProvider"


def resolve_providers(
    requested: Sequence[str] | None, available: Sequence[str], known: Sequence[str] = ()
) -> list[str]:
    """Turn requested provider names into onnxruntime names that are available.

    Args:
        requested: ``["cuda"]``, ``["cpu"]``, onnxruntime names, or ``None`` (CPU).
        available: ``onnxruntime.get_available_providers()``.
        known: ``onnxruntime.get_all_providers()``: every name onnxruntime knows, built
            here or not. A requested name outside it and the aliases is a typo.

    Returns:
        The providers to use, CPU always last.

    Raises:
        ValueError: A name that is neither an alias nor one of ``known`` (when given).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     resolve_providers(["cuda"], ["CPUExecutionProvider"])
        ['CPUExecutionProvider']
        >>> "falling back to CPUExecutionProvider" in str(caught[0].message)
        True
    """
    if isinstance(requested, str):
        requested = [requested]
    resolved: list[str] = []
    for name in requested or ():
        full = PROVIDER_ALIASES.get(name.lower(), name)
        if known and full not in known:
            raise ValueError(
                f"execution provider {name!r} is not one onnxruntime knows; expected one of "
                f"{sorted(PROVIDER_ALIASES)} or an onnxruntime name such as {_CPU!r}."
            )
        if full not in available:
            cuda = full in ("CUDAExecutionProvider", "TensorrtExecutionProvider")
            advice = " For CUDA, install onnxruntime-gpu built for your CUDA version." * cuda
            warnings.warn(
                f"execution provider {name!r} ({full}) is not available in this onnxruntime "
                f"(available: {list(available)}); falling back to {_CPU}.{advice}",
                RuntimeWarning,
                stacklevel=4,
            )
        elif full not in resolved:
            resolved.append(full)
    if _CPU in resolved:
        resolved.remove(_CPU)
    return [*resolved, _CPU]


def open_session(
    ort: Any,
    model: str | os.PathLike[str] | bytes,
    session_options: Any,
    providers: list[str],
    upcast: Sequence[str],
) -> Any:
    """Create the ``InferenceSession``; typed errors for a missing file or a missing kernel.

    Args:
        ort: The ``onnxruntime`` module.
        model: Path to a ``.onnx`` file, or its bytes.
        session_options: ``onnxruntime.SessionOptions`` or ``None``.
        providers: Resolved provider names.
        upcast: Dtype names (``"bfloat16"``, ``"float16"``) to compute in float32 instead.

    Raises:
        ModelNotFoundError: ``model`` is a path to no file.
        MissingKernelError: onnxruntime has no kernel for an op with its dtype.
    """
    if not isinstance(model, bytes):
        path = os.fspath(model)
        if not os.path.isfile(path):
            what = "a folder" if os.path.isdir(path) else "no file"
            raise ModelNotFoundError(
                f"Cannot load the ONNX model {path!r}: expected a .onnx file, found {what} at "
                f"{str(pathlib.Path(path).absolute())!r}. Check the path (and the working "
                "folder).",
                path,
            )
    source: str | bytes = model if isinstance(model, bytes) else os.fspath(model)
    if upcast:
        source = _upcast_bytes(source, upcast)
    try:
        return ort.InferenceSession(source, sess_options=session_options, providers=providers)
    except Exception as error:  # onnxruntime's pybind classes have no common public base
        text = str(error)
        if type(error).__name__ in _UNREADABLE:
            raise _invalid_model(model, text) from error
        if "Could not find an implementation for" not in text:
            raise
        message, dtype = _missing_kernel_message(source, text, providers)
        raise MissingKernelError(message, dtype) from error


#: onnxruntime's exceptions for a model it cannot read or check (its pybind class names).
_UNREADABLE = frozenset(
    {"InvalidProtobuf", "InvalidArgument", "InvalidGraph", "Fail", "NoSuchFile"}
)
_LFS_POINTER = b"version https://git-lfs"


_NODE = re.compile(r"running (?P<op>\w+) node\. Name:'(?P<name>[^']*)'")


def model_run_error(
    error: BaseException, names: Sequence[str], arrays: Sequence[object], checked: str = ""
) -> ModelRunError:
    """ONNX Runtime's failure on inputs the adapter accepted: the node, the shapes, what next.

    ``checked``: for a file without adapter metadata, what was checked of the inputs (the
    graph's declared dtypes, ranks and fixed sizes); the message then says that the file
    holds no record of the sizes it was exported for.
    """
    text = str(error).strip()
    said = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text).splitlines()[0]
    node = _NODE.search(text)
    where = f" in node {node.group('name')!r} ({node.group('op')})" if node else ""
    said = said.split("Status Message: ")[-1]
    said = re.sub(r"^\S*onnxruntime_src\S*:\d+ .*?\) ", "", said)  # ORT's C++ location
    shapes = ", ".join(
        f"{n} {tuple(getattr(a, 'shape', ()))}" for n, a in zip(names, arrays, strict=False)
    )
    if checked:
        return ModelRunError(
            f"ONNX Runtime failed{where} on inputs that match the graph's declared {checked} "
            f"({shapes}): {said[:400]}. The file has no adapter metadata (it was not saved by "
            "onnx_export), so nothing records the sizes it was exported for: call it with "
            "the sizes its producer used, or export it again with onnx_export."
        )
    return ModelRunError(
        f"ONNX Runtime failed{where} on inputs that match the file's declared dtypes and "
        f"shapes ({shapes}): {said[:400]}. The file cannot serve these inputs, though its "
        "inputs say it can: it was exported without checking its dynamic axes at a second "
        "size. Re-export it with this version (the export runs each dynamic axis at other "
        "sizes and captures again where the example's sizes were baked in), or call it at "
        "the example's sizes."
    )


def _invalid_model(model: str | os.PathLike[str] | bytes, text: str) -> InvalidModelError:
    """The error for a model onnxruntime cannot read: what it is, and what to do."""
    said = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text.strip()).splitlines()[0]
    if isinstance(model, bytes):
        head, size, path, what = model[:64], len(model), None, "The model bytes"
    else:
        path = os.fspath(model)
        size = os.path.getsize(path)
        with open(path, "rb") as file:
            head = file.read(64)
        what = f"The file {path!r}"
    if size == 0:
        reason = "is empty (0 bytes), so it holds no ONNX model: the save wrote nothing"
    elif head.startswith(_LFS_POINTER):
        reason = (
            f"is a Git LFS pointer ({size} bytes), not the model: fetch the real file with "
            "`git lfs pull`"
        )
    elif "Protobuf parsing failed" in text or "No graph was found" in text:
        reason = (
            f"is not a complete ONNX model ({size} bytes; ONNX Runtime: {said}): it is cut "
            "short (an interrupted save, copy or download) or is another kind of file"
        )
    else:
        reason = f"cannot be loaded by ONNX Runtime ({size} bytes): {said}"
    return InvalidModelError(
        f"{what} {reason}. Copy or download it again, or export and save the model again "
        "(ONNXProgram.save, or onnx-export export).",
        path,
    )


def _upcast_bytes(source: str | bytes, dtypes: Sequence[str]) -> bytes:
    import onnx

    from ._upcast import UPCAST_DTYPES, upcast_model

    unknown = [d for d in dtypes if d not in UPCAST_DTYPES]
    if unknown:
        raise ValueError(
            f"upcast: expected dtype names among {sorted(UPCAST_DTYPES)}, got {unknown}."
        )
    proto = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    upcast_model(proto, dtypes)
    try:
        return bytes(proto.SerializeToString())
    except ValueError as error:  # protobuf's 2 GB limit
        raise ValueError(
            "upcast: the float32 model is over protobuf's 2 GB limit and cannot be built in "
            "memory; export the model in float32 instead (model.float())."
        ) from error


_MISSING = re.compile(
    r"Could not find an implementation for (\S+?)\((\d+)\) node with name '([^']*)'"
)


def _missing_kernel_message(
    source: str | bytes, text: str, providers: Sequence[str]
) -> tuple[str, str]:
    match = _MISSING.search(text)
    op, version, node_name = match.groups() if match else ("an op", "?", "?")
    dtype, others = _narrow_ops(source, node_name)
    on = ", ".join(providers)
    what = f"{dtype} kernel" if dtype else "kernel"
    message = (
        f"ONNX Runtime ({on}) has no {what} for {op} (opset {version}, node {node_name!r}), so "
        "it cannot run this model."
    )
    if others:
        message += f" Other ops of this model that compute in {dtype} may lack one too: "
        message += ", ".join(others) + "."
    if dtype in ("bfloat16", "float16"):
        message += (
            f" Either load it with upcast=[{dtype!r}] (e.g. onnx_export.load(path, "
            f"upcast=[{dtype!r}])), which computes in float32 and keeps {dtype} inputs and "
            "outputs; or run it on CUDA (providers=['cuda'] with onnxruntime-gpu); or export "
            "the model in float32 (model.float())."
        )
    else:
        message += " Run it on another execution provider, or export the model in float32."
    return message, dtype


def _narrow_ops(source: str | bytes, node_name: str) -> tuple[str, list[str]]:
    """The dtype of the failing node's inputs, and the other op types with inputs of it."""
    try:
        import onnx

        proto = (
            onnx.load_from_string(source)
            if isinstance(source, bytes)
            else onnx.load(source, load_external_data=False)
        )
        graph = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # the message is still useful without the details
        return "", []
    types = {t.name: t.data_type for t in graph.initializer}
    for value in (*graph.input, *graph.output, *graph.value_info):
        types[value.name] = value.type.tensor_type.elem_type
    node = next((n for n in graph.node if n.name == node_name), None)
    if node is None:
        return "", []
    floats = [types[i] for i in node.input if types.get(i) not in (None, 0, 6, 7, 9)]
    if not floats:
        return "", []
    element_type = floats[0]
    name = str(onnx.helper.tensor_dtype_to_np_dtype(element_type).name)
    others = sorted(
        {
            n.op_type
            for n in graph.node
            if n.op_type not in ("Cast", node.op_type)
            and any(types.get(i) == element_type for i in n.input)
        }
    )
    return name, others


def read_spec(session: Any) -> AdapterSpec | None:
    """Read the adapter spec from a session's model metadata, or ``None`` if it has none.

    Only onnxruntime is needed (``get_modelmeta().custom_metadata_map``); ``onnx`` is not.

    Args:
        session: An ``onnxruntime.InferenceSession``.

    Returns:
        The validated spec, or ``None``.

    Raises:
        AdapterSpecError: The metadata is malformed.
    """
    text = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    return None if text is None else AdapterSpec.from_json(text)


def check_spec_fits_session(spec: AdapterSpec, session: Any) -> None:
    """Check that the spec's tensor leaves are exactly the graph's inputs and outputs.

    Names must match one to one; each dtype must be the graph's (complex tensors as their real
    view), and ranks and static sizes must agree where the graph declares them.

    Args:
        spec: The adapter spec.
        session: An ``onnxruntime.InferenceSession``.

    Raises:
        AdapterSpecError: Naming the field that does not fit, e.g. ``outputs[1].tensor.dtype``.
    """
    _check_side("inputs", spec.inputs, session.get_inputs())
    _check_side("outputs", spec.outputs, session.get_outputs())


def _check_side(side: str, leaves: Sequence[LeafSpec], graph_args: Sequence[Any]) -> None:
    graph = {arg.name: arg for arg in graph_args}
    tensors = [(i, leaf.tensor) for i, leaf in enumerate(leaves) if leaf.tensor is not None]
    names = [t.name for _, t in tensors]
    if sorted(names) != sorted(graph):
        raise spec_error(
            side,
            f"one tensor leaf per graph {side[:-1]} {sorted(graph)} (the metadata may belong to "
            "another model)",
            f"tensor leaves {names}",
        )
    for i, tensor in tensors:
        arg = graph[tensor.name]
        expected_type = ORT_TYPES[onnx_value_dtype(tensor.dtype)]
        if arg.type != expected_type:
            raise spec_error(f"{side}[{i}].tensor.dtype", f"the graph's {arg.type}", expected_type)
        shape = onnx_value_shape(tensor)
        graph_shape = arg.shape
        if not isinstance(graph_shape, list) or (not graph_shape and shape):
            continue  # the graph does not declare a shape
        if len(graph_shape) != len(shape) or any(
            isinstance(g, int) and isinstance(s, int) and g != s
            for g, s in zip(graph_shape, shape, strict=True)
        ):
            raise spec_error(
                f"{side}[{i}].tensor.shape", f"a shape that fits the graph's {graph_shape}", shape
            )


def quiet_session_options(ort: Any) -> Any:
    """``SessionOptions`` under which creating a session logs errors only.

    For the sessions an export opens to check itself (the parity check, the culprit
    search's debug models with their extra outputs): ONNX Runtime's warnings there
    ("Removing initializer ... not used", "can't constant fold CastLike") are about graphs
    the user never sees, and would reach the terminal as raw log lines.
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    return options


def quiet_run_options(ort: Any) -> Any:
    """``RunOptions`` under which a failing run logs nothing to stderr.

    A run that fails raises, and the adapter turns the exception into its own typed error
    (``ModelRunError``, with ONNX Runtime's message inside); ONNX Runtime's own log line for
    the same failure ("[E:onnxruntime:...] Non-zero status code ...") would be a raw second
    copy on the user's terminal, also for the runs an export makes to check itself.
    """
    options = ort.RunOptions()
    options.log_severity_level = 4  # fatal only
    return options
