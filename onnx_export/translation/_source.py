"""Where an FX node came from in the user's code: module path and source line."""

from __future__ import annotations

import dataclasses
import functools
import os
import re

import torch
import torch.fx

from onnx_export.capture._user_code import is_user_code

__all__ = ["NodeOrigin", "node_origin"]

_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>[^\n]*)'
)
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
#: Without a user frame (a torch module exported as it is), torch's module code, e.g.
#: ``nn/modules/transformer.py``, is the model's code; torch's tracing machinery
#: (``fx/proxy.py``, ``utils/_stats.py``) is not.
_TORCH_MODULES = os.path.join(_TORCH_DIR, "nn", "")
_NN_MODULES = os.path.join(_TORCH_DIR, "nn", "modules", "")


@dataclasses.dataclass(frozen=True)
class NodeOrigin:
    """The user-facing origin of an FX node.

    Attributes:
        module_path: Dotted path of the innermost ``nn.Module`` (``""`` for the root).
        module_class: Qualified class name of that module.
        file: Source file of the innermost frame outside torch, onnx_export (its capture
            patches and LSTM/GRU rewrites too) and the standard library, if known.
        line: Its line number.
        code: Its line of code.
        stack_trace: The full stack trace torch.export recorded.
    """

    module_path: str = ""
    module_class: str = ""
    file: str | None = None
    line: int | None = None
    code: str = ""
    stack_trace: str = ""

    @property
    def where(self) -> str:
        """``file:line`` (or ``"<unknown>"``) for messages."""
        return f"{self.file}:{self.line}" if self.file else "<unknown location>"


def _module_frame(frames: list[re.Match[str]]) -> re.Match[str] | None:
    """Without a user frame: the innermost ``forward`` of a torch module, else torch's ``nn``.

    The model is then an ``nn.Sequential`` (or ``ModuleList`` loop) of torch's own
    modules; the tracer's frames (``torch/fx/proxy.py``) say nothing to the user.
    """
    torch_nn = [f for f in frames if f["file"].startswith(_TORCH_MODULES)]
    forwards = [f for f in torch_nn if f["file"].startswith(_NN_MODULES) and f["func"] == "forward"]
    if forwards:
        return forwards[-1]
    return torch_nn[-1] if torch_nn else None


@functools.lru_cache(maxsize=1024)
def _chosen_frame(trace: str) -> tuple[str, int, str] | None:
    """The file, line and code of the frame ``trace`` points the user to.

    Cached by the trace's text: an FX node's origin is read by the report and again by
    translation, and the aten nodes of one line of the model share their trace (#39).
    """
    frames = list(_FRAME.finditer(trace))
    user = [f for f in frames if is_user_code(f["file"])]
    chosen = user[-1] if user else _module_frame(frames)
    if chosen is None:
        return None
    return chosen["file"], int(chosen["line"]), chosen["code"].strip()


def node_origin(node: torch.fx.Node) -> NodeOrigin:
    """Read the module path and user source line of ``node`` from its metadata."""
    stack = node.meta.get("nn_module_stack") or {}
    module_path, module_class = "", ""
    if stack:
        module_path, cls = list(stack.values())[-1]
        module_class = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    trace = node.meta.get("stack_trace") or ""
    chosen = _chosen_frame(trace)
    if chosen is None:
        return NodeOrigin(module_path, module_class, stack_trace=trace)
    file, line, code = chosen
    return NodeOrigin(module_path, module_class, file, line, code, trace)
