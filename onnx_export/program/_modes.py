"""The eager reference users run (eval mode, no grad), and what training mode put in a graph.

Eager PyTorch is compared with ONNX Runtime in the mode a model is deployed in:
``model.eval()`` under ``torch.no_grad()``. That is also the mode in which PyTorch takes its
fast paths (``nn.TransformerEncoder`` with a padding mask turns the batch into nested
tensors and zeroes the padded positions), which torch.export never traces: a comparison
with the traced program alone cannot see that difference.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

__all__ = [
    "DEPLOYED_MODE",
    "TrainingComputation",
    "deployed_mode",
    "fast_path_modules",
    "kept",
    "modules_in_training",
    "mutated_buffers",
    "path_cause",
    "random_nodes",
    "run_deployed",
    "training_computations",
]

#: How the reference runs, in messages.
DEPLOYED_MODE = "the model in eval mode under torch.no_grad()"

#: Modules whose eval/no-grad forward takes a fused fast path torch.export does not trace.
_FAST_PATH_CLASSES: tuple[type[torch.nn.Module], ...] = (
    torch.nn.TransformerEncoder,
    torch.nn.TransformerEncoderLayer,
    torch.nn.MultiheadAttention,
)


@contextlib.contextmanager
def deployed_mode(module: torch.nn.Module) -> Iterator[None]:
    """``module`` in eval mode under ``torch.no_grad()`` for the block; flags restored after.

    Example:
        >>> import torch
        >>> model = torch.nn.Dropout(0.5)
        >>> with deployed_mode(model):
        ...     model.training, torch.is_grad_enabled()
        (False, False)
        >>> model.training
        True
    """
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, flag in flags:
            m.training = flag


def _copy(leaf: Any) -> Any:
    if type(leaf) is np.ndarray:
        return torch.from_numpy(leaf.copy())
    return leaf.clone() if isinstance(leaf, torch.Tensor) else leaf


def run_deployed(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    program: ExportedProgram | None = None,
) -> Any:
    """Run ``module`` as it is deployed (:func:`deployed_mode`) on copies of the inputs.

    Buffers the captured ``program`` updates in place (running statistics, counters) are
    put back afterwards, so that checking a model does not change it.
    """
    args, kwargs = pytree.tree_map(_copy, (args, dict(kwargs)))
    buffers: dict[str, torch.Tensor] = {}
    if program is not None:
        for name in program.graph_signature.buffers_to_mutate.values():
            with contextlib.suppress(AttributeError):
                buffers[name] = module.get_buffer(name)
    with kept(buffers), deployed_mode(module):
        return module(*args, **kwargs)


@contextlib.contextmanager
def kept(tensors: dict[str, torch.Tensor]) -> Iterator[None]:
    """The values of ``tensors`` put back after the block (a run may update them in place)."""
    saved = {name: t.detach().clone() for name, t in tensors.items()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, value in saved.items():
                tensors[name].copy_(value)


def mutated_buffers(program: ExportedProgram) -> dict[str, torch.Tensor]:
    """The buffers that running ``program`` updates in place (running statistics...)."""
    names = program.graph_signature.buffers_to_mutate.values()
    found = {name: program.state_dict.get(name) for name in names}
    return {name: t for name, t in found.items() if isinstance(t, torch.Tensor)}


@dataclasses.dataclass(frozen=True)
class TrainingComputation:
    """A module whose training mode put a training computation into the graph.

    Attributes:
        module: The module's path in the model (``""`` for the model itself).
        module_class: Its class name.
        what: What the graph computes in training mode (``"batch statistics"``...).
    """

    module: str
    module_class: str
    what: str

    def __str__(self) -> str:
        return f"{self.module or '<model>'} ({self.module_class}): {self.what}"


_BATCH_NORMS = {
    "aten::_native_batch_norm_legit_functional": 5,
    "aten::_native_batch_norm_legit": 5,
    "aten::native_batch_norm": 5,
    "aten::batch_norm": 5,
    "aten::_batch_norm_with_update_functional": -1,
    "aten::_batch_norm_with_update": -1,
}


def _op_name(node: torch.fx.Node) -> str:
    name = getattr(node.target, "name", None)
    return name().split(".")[0] if callable(name) else ""


def _innermost(node: torch.fx.Node) -> tuple[str, str]:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return str(path), name.rsplit(".", 1)[-1]


def _in_training(module: torch.nn.Module, path: str) -> bool:
    try:
        return module.get_submodule(path).training if path else module.training
    except AttributeError:  # a path in dynamo's spelling (L['self'].bn): the model's flag
        return module.training


def _argument(node: torch.fx.Node, name: str) -> Any:
    """The value of the op's argument ``name`` at ``node`` (``...`` when it has none)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return ...
    for position, argument in enumerate(schema.arguments):
        if argument.name == name:
            if name in node.kwargs:
                return node.kwargs[name]
            if position < len(node.args):
                return node.args[position]
            return argument.default_value if argument.has_default_value() else ...
    return ...


def _draws(node: torch.fx.Node) -> bool:
    """Whether a seeded op draws here: not a dropout of probability 0 or out of training."""
    if _argument(node, "train") is False or _argument(node, "training") is False:
        return False
    return all(_argument(node, name) not in (0, 0.0) for name in ("p", "dropout_p"))


def random_nodes(program: ExportedProgram) -> list[torch.fx.Node]:
    """The graph's nodes that draw random numbers (``nondeterministic_seeded`` ops).

    Dropouts of probability 0 and attention without dropout are not counted.
    """
    seeded = torch.Tag.nondeterministic_seeded
    return [
        n
        for n in program.graph.nodes
        if n.op == "call_function" and seeded in getattr(n.target, "tags", ()) and _draws(n)
    ]


def _batch_norm_in_training(node: torch.fx.Node) -> bool:
    op = _op_name(node)
    if op == "aten::_native_batch_norm_legit" and "no_stats" in str(node.target):
        return True
    position = _BATCH_NORMS.get(op)
    if position is None:
        return False
    if position < 0:  # the *_with_update ops always compute batch statistics
        return True
    return len(node.args) > position and node.args[position] is True


def training_computations(
    module: torch.nn.Module, program: ExportedProgram
) -> list[TrainingComputation]:
    """The modules in training mode whose training computations the graph holds.

    Batch norm with batch statistics, and random ops (dropout masks) of modules in
    training mode; one entry per module. Empty for a model in eval mode.
    """
    if not any(m.training for m in module.modules()):
        return []
    found: dict[str, TrainingComputation] = {}
    randoms = set(random_nodes(program))
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        path, cls = _innermost(node)
        if _batch_norm_in_training(node):
            what = "batch statistics instead of the running mean and variance"
        elif node in randoms and _in_training(module, path):
            what = f"random numbers ({_op_name(node).removeprefix('aten::')}), as in training"
        else:
            continue
        found.setdefault(path, TrainingComputation(path, cls, what))
    return list(found.values())


def modules_in_training(module: torch.nn.Module) -> list[str]:
    """Submodules in training mode whose forward depends on it (batch norm, dropout p > 0).

    Without a captured graph (the ``verify`` command), by class: batch and instance norms
    that track running statistics, dropouts of probability above 0, ``RReLU``.
    """
    found = []
    for name, m in module.named_modules():
        if not m.training:
            continue
        norm = isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or (
            isinstance(m, torch.nn.modules.instancenorm._InstanceNorm) and m.track_running_stats
        )
        dropout = isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
        if norm or dropout or isinstance(m, torch.nn.RReLU):
            found.append(f"{name or '<model>'} ({type(m).__name__})")
    return found


def fast_path_modules(module: torch.nn.Module) -> list[str]:
    """Paths of submodules whose eval/no-grad forward may take a fast path not traced."""
    return [
        f"{name or '<model>'} ({type(m).__name__})"
        for name, m in module.named_modules()
        if isinstance(m, _FAST_PATH_CLASSES)
    ][:4]


def path_cause(module: torch.nn.Module, training: list[TrainingComputation]) -> str:
    """Why ``module`` as deployed differs from a trace that ONNX Runtime agrees with."""
    if training:
        return (
            "the model was exported in training mode, so the file computes what "
            f"model.train() computes: {'; '.join(str(t) for t in training)}. Call "
            "model.eval() before exporting."
        )
    modules = fast_path_modules(module)
    fast = (
        f" PyTorch's fast paths do this, and the model has modules that take one: "
        f"{', '.join(modules)} (nn.TransformerEncoder given a src_key_padding_mask "
        "turns the batch into nested tensors and returns zeros at the padded positions; "
        "the traced path computes them)."
        if modules
        else ""
    )
    return (
        "ONNX Runtime agrees with the program torch.export traced, but the model run as "
        "deployed (eval mode, torch.no_grad()) computes other numbers: it takes a path the "
        f"trace did not.{fast} Next steps: ignore the outputs at the positions that differ "
        "(padding), or make the model compute them the same way in both paths (for "
        "nn.TransformerEncoder: mask the padded positions of its output yourself, e.g. "
        "out.masked_fill(mask[..., None], 0))."
    )
