"""``onnx-export run``: call a saved model on inputs from an ``.npz`` file, without torch.

The keys of the ``.npz`` file are either

- the graph input names, one array each (nested inputs have dotted names such as
  ``cache.0``, ``pair.left``); with adapter metadata, each leaf is checked as the adapter
  checks it, the constants recorded at export filled in; or
- with adapter metadata, ``forward``'s parameter names, each a tensor argument.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from onnx_export.cli._arguments import (
    add_model_argument,
    add_provider_option,
    add_upcast_option,
    load_hint,
)
from onnx_export.cli._common import (
    CommandError,
    Status,
    Subcommands,
    UsageError,
    add_command,
    existing_file,
    from_onnxruntime,
    one_line,
    writable_output,
)

__all__ = ["register", "named_leaves"]
_SHOWN_VALUES = 6


def register(commands: Subcommands) -> None:
    """Add ``run MODEL.onnx --inputs INPUTS.npz [--provider P] [--output OUT.npz]``."""
    parser = add_command(
        commands,
        "run",
        help="run a saved model in ONNX Runtime on inputs from an .npz file",
        description="Load MODEL.onnx with onnx_export.load and call it on the arrays in "
        "INPUTS.npz, keyed by graph input name (nested inputs have dotted names such as "
        "cache.0) or, for models saved with adapter metadata, by forward's parameter name. "
        "Prints each output's name, dtype, shape and first values, or saves them. Needs no "
        "torch. Exits 1 when the inputs do not fit the model or the run fails, 2 when a "
        "file is missing, empty or unreadable or --output cannot be written.",
        handler=_run,
    )
    add_model_argument(parser)
    parser.add_argument(
        "--inputs", type=pathlib.Path, required=True, metavar="INPUTS.npz", help="the inputs"
    )
    add_provider_option(parser)
    add_upcast_option(parser)
    parser.add_argument(
        "--output",
        type=pathlib.Path,
        metavar="OUT.npz",
        help="save the outputs here, keyed by graph output name, instead of printing them",
    )


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    from onnx_export.adapters import AdapterError, load

    model = existing_file(args.model, "the model")
    arrays = _read_npz(existing_file(args.inputs, "the inputs file"))
    output = None
    if args.output is not None:
        output = writable_output(args.output, "--output", "outputs.npz")
    status = Status()
    try:
        with status(f"Loading {model}"):
            module = load(model, providers=[args.provider], upcast=args.upcast)
    except Exception as e:
        if not (isinstance(e, AdapterError | OSError | ValueError) or from_onnxruntime(e)):
            raise
        reason = load_hint(one_line(str(e)))
        raise UsageError(f"cannot load {model} as an ONNX model: {reason}") from e
    try:
        with status("Running"):
            outputs = _call(module, arrays)
    except AdapterError as e:
        raise CommandError(one_line(str(e))) from e
    except Exception as e:
        if not from_onnxruntime(e):
            raise
        raise CommandError(f"ONNX Runtime failed: {type(e).__name__}: {one_line(str(e))}") from e
    leaves = named_leaves(module, outputs)
    if output is not None:
        saved: dict[str, Any] = {name: np.asarray(value) for name, value in leaves}
        _save_npz(output, saved)
        echo(f"Saved {len(leaves)} outputs to {output} (ran on {module.providers[0]})")
        return 0
    echo(f"Ran {model.name} on {module.providers[0]}:")
    for name, value in leaves:
        echo(f"  {name}: {_describe(value)}")
    return 0


def _save_npz(path: pathlib.Path, arrays: dict[str, Any]) -> None:
    """``np.savez`` to a temporary file beside ``path``, then renamed (atomic)."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)  # as ONNXProgram.save does
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    written = False
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **arrays)
        umask = os.umask(0)  # the command's process reads its umask (no other thread here)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        os.replace(temporary, path)
        written = True
    except OSError as e:
        raise CommandError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        if not written:
            pathlib.Path(temporary).unlink(missing_ok=True)


def _read_npz(path: pathlib.Path) -> dict[str, np.ndarray[Any, Any]]:
    with path.open("rb") as file:
        magic = file.read(6)
    if magic == b"\x93NUMPY":
        raise UsageError(f"{path} holds one array (.npy); save the inputs with np.savez.")
    if not magic.startswith(b"PK"):
        raise UsageError(
            f"{path} is not an .npz file (a zip archive of arrays); write the inputs with "
            "numpy.savez(path, name=array, ...)."
        )
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"cannot read {path} as an .npz file of arrays: {one_line(str(e))}") from e
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise UsageError(f"{path} holds one array (.npy); save the inputs with np.savez.")
    try:
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"cannot read {path} as an .npz file of arrays: {one_line(str(e))}") from e


def _call(module: Any, arrays: Mapping[str, np.ndarray[Any, Any]]) -> Any:
    spec = module.spec
    if spec is None:
        return module(**arrays)  # flat mode: by graph input name
    tensor_names = {leaf.tensor.name for leaf in spec.inputs if leaf.tensor is not None}
    constants = {leaf.path: leaf.value for leaf in spec.inputs if leaf.kind == "constant"}
    given = {k: v for k, v in arrays.items() if k in constants and k not in tensor_names}
    for key, array in given.items():
        _check_constant(key, array, constants[key])
    arrays = {k: v for k, v in arrays.items() if k not in given}
    if set(arrays) == tensor_names:
        return _call_by_graph_names(module, spec, arrays)
    parameters = {p.name: p.kind for p in spec.parameters}
    unknown = sorted(set(arrays) - set(parameters))
    if unknown and set(arrays) < tensor_names:
        raise CommandError(
            f"the inputs file lacks the graph inputs {sorted(tensor_names - set(arrays))}: "
            f"the model takes one array for each of {sorted(tensor_names)} and the file has "
            f"{sorted(arrays)}. Add the missing arrays to the .npz (`onnx-export info` lists "
            "each input's dtype and shape)."
        )
    if unknown:
        raise CommandError(
            f"the inputs file has arrays {unknown} that are neither graph inputs "
            f"{sorted(tensor_names)} (all of them) nor parameters of forward "
            f"{list(parameters)}. Key the arrays by one or the other."
        )
    values: dict[str, Any] = {**arrays, **{k: constants[k] for k in given if k in parameters}}
    positional = [values.pop(p.name) for p in spec.parameters if p.kind == "positional_only"]
    return module(*positional, **values)


def _check_constant(key: str, array: np.ndarray[Any, Any], recorded: Any) -> None:
    """An array for a constant recorded at export: accepted at the same value, else refused."""
    item = array.item() if array.size == 1 else None
    same = item == recorded
    if isinstance(recorded, float) and isinstance(item, int | float):
        same = math.isclose(item, recorded, rel_tol=1e-6)
    if array.size == 1 and same:
        return
    given = repr(item) if array.size == 1 else f"an array of shape {list(array.shape)}"
    raise CommandError(
        f"the inputs file sets {key!r} to {given}, but the model was exported with "
        f"{key} = {recorded!r} baked in (a constant, not an input of the graph): leave "
        f"{key!r} out of the .npz, or export the model again with {key} set as you need."
    )


def _call_by_graph_names(module: Any, spec: Any, arrays: Mapping[str, np.ndarray[Any, Any]]) -> Any:
    """Run on one array per graph input; the adapter checks each leaf and rebuilds outputs.

    The nested call is not rebuilt: a namedtuple or dataclass input (``pair.left``,
    ``batch.ids``) needs none of the model's classes.
    """
    del spec  # the module holds it
    return module.call_by_graph_names(arrays)


def named_leaves(module: Any, outputs: Any) -> list[tuple[str, Any]]:
    """Each output leaf with its graph output name (or its path, for constants)."""
    from onnx_export.adapters import leaf_paths, tree_flatten

    spec = module.spec
    if spec is None:
        return list(zip(module.output_names, outputs, strict=True))
    leaves, tree = tree_flatten(outputs)
    if len(leaves) == len(spec.outputs):
        names = [leaf.tensor.name if leaf.tensor else leaf.path for leaf in spec.outputs]
    else:  # a structure the spec does not describe; name by path
        names = leaf_paths(tree, "output")
    return list(zip(names, leaves, strict=True))


def _describe(value: Any) -> str:
    if not isinstance(value, np.ndarray):
        return f"{type(value).__name__} {value!r}"
    flat = value.reshape(-1)
    shown = np.array2string(flat[:_SHOWN_VALUES], precision=4, separator=", ")
    more = f" ... ({flat.size} values)" if flat.size > _SHOWN_VALUES else ""
    return f"{value.dtype}{list(value.shape)} {shown}{more}"
