"""Where an FX node came from in the user's code: module path and source line."""

from __future__ import annotations

import dataclasses
import os
import re

import torch
import torch.fx

__all__ = ["NodeOrigin", "node_origin"]

_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>[^\n]*)'
)
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_NN_MODULES = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep


@dataclasses.dataclass(frozen=True)
class NodeOrigin:
    """The user-facing origin of an FX node.

    Attributes:
        module_path: Dotted path of the innermost ``nn.Module`` (``""`` for the root).
        module_class: Qualified class name of that module.
        file: Source file of the innermost frame outside torch itself, if known.
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
    """The innermost ``forward`` of a torch module, where no frame is the user's.

    The model is then an ``nn.Sequential`` (or ``ModuleList`` loop) of torch's own
    modules; the tracer's frames (``torch/fx/proxy.py``) say nothing to the user.
    """
    modules = [f for f in frames if f["file"].startswith(_NN_MODULES) and f["func"] == "forward"]
    return modules[-1] if modules else (frames[-1] if frames else None)


def node_origin(node: torch.fx.Node) -> NodeOrigin:
    """Read the module path and user source line of ``node`` from its metadata."""
    stack = node.meta.get("nn_module_stack") or {}
    module_path, module_class = "", ""
    if stack:
        module_path, cls = list(stack.values())[-1]
        module_class = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    trace = node.meta.get("stack_trace") or ""
    frames = list(_FRAME.finditer(trace))
    user = [f for f in frames if not f["file"].startswith(_TORCH_DIR)]
    chosen = user[-1] if user else _module_frame(frames)
    if chosen is None:
        return NodeOrigin(module_path, module_class, stack_trace=trace)
    return NodeOrigin(
        module_path,
        module_class,
        chosen["file"],
        int(chosen["line"]),
        chosen["code"].strip(),
        trace,
    )
