"""The catalogue of rules the ONNX exporter reports, with stable ``OXE`` ids.

Each rule is a module constant (for example :data:`UNSUPPORTED_OP`) and appears in
:data:`ALL_RULES`. Ids never change meaning and are never reused; a retired rule keeps its
id. Every rule's ``help_uri`` points at ``{DOCS_BASE_URI}/rules/{id}/``, the page built
from ``docs/rules/{id}.md`` in this repository.

Example:
    >>> from onnx_export.diagnostics import rules
    >>> rules.UNSUPPORTED_OP.id, rules.UNSUPPORTED_OP.name
    ('OXE0006', 'unsupported-op')
    >>> rules.get_rule("OXE0006") is rules.UNSUPPORTED_OP
    True
    >>> rules.UNSUPPORTED_OP.help_uri
    'https://onnx-export.github.io/onnx-export/rules/OXE0006/'
"""

from __future__ import annotations

from ._levels import Level
from ._rules import Rule

__all__ = [
    "DOCS_BASE_URI",
    # Capture
    "CAPTURE_ATTEMPT_FAILED",
    "CAPTURE_SUCCEEDED",
    "BUFFER_MUTATION",
    "INPUT_MISMATCH",
    "DYNAMIC_SHAPE_FIXED",
    "CAPTURE_PATCHES",
    "CAPTURE_PATCH_SKIPPED",
    # Decomposition and translation
    "DECOMPOSITION",
    "DISPATCH_DECISION",
    "DISPATCH_FALLBACK",
    "UNSUPPORTED_OP",
    "UNSUPPORTED_HIGHER_ORDER_OP",
    "CONVERSION_FAILED",
    # Optimization, saving, verification
    "OPTIMIZER_PASS",
    "OPTIMIZATION_FAILED",
    "MODEL_SAVED",
    "SERIALIZATION_FAILED",
    "VERIFICATION_RESULT",
    "VERIFICATION_MISMATCH",
    "PARITY_MISMATCH",
    "PARITY_SKIPPED",
    "INVALID_GRAPH",
    "TRAINING_MODE",
    "STAGE_TIMES",
    # Messages from other code
    "PYTHON_WARNING",
    "LOG_RECORD",
    # The overall outcome
    "EXPORT_FAILED",
    # The catalogue
    "ALL_RULES",
    "get_rule",
]

DOCS_BASE_URI = "https://onnx-export.github.io/onnx-export"
"""Root of the documentation site, which is built from the ``docs/`` folder of the repository.

Example:
    >>> f"{DOCS_BASE_URI}/rules/OXE0001/"
    'https://onnx-export.github.io/onnx-export/rules/OXE0001/'
"""


def _rule(rule_id: str, name: str, level: Level, *, template: str, short: str, full: str) -> Rule:
    return Rule(
        id=rule_id,
        name=name,
        message_template=template,
        short_description=short,
        full_description=full,
        help_uri=f"{DOCS_BASE_URI}/rules/{rule_id}/",
        default_level=level,
    )


CAPTURE_ATTEMPT_FAILED = _rule(
    "OXE0001",
    "capture-attempt-failed",
    Level.ERROR,
    template=(
        "Capturing the model with strategy '{strategy}' failed: {exception_type}: "
        "{exception_message}"
    ),
    short="One strategy for capturing the PyTorch program (torch.export) failed.",
    full=(
        "The exporter tries capture strategies in order (strict torch.export, non-strict, ...); "
        "this attempt raised an exception. A later strategy may still succeed. "
        "Fields: strategy (name of the capture strategy), exception_type (qualified name of the "
        "exception class), exception_message (the exception's message)."
    ),
)
"""OXE0001: a capture strategy raised. Example: ``CAPTURE_ATTEMPT_FAILED.id == "OXE0001"``."""

CAPTURE_SUCCEEDED = _rule(
    "OXE0002",
    "capture-succeeded",
    Level.NOTE,
    template="Captured the model with strategy '{strategy}' in {seconds} s.",
    short="The PyTorch program was captured.",
    full=(
        "A capture strategy produced an ExportedProgram. "
        "Fields: strategy (name of the capture strategy), seconds (wall time of the capture)."
    ),
)
"""OXE0002: capture succeeded. Example: ``CAPTURE_SUCCEEDED.name == "capture-succeeded"``."""

DECOMPOSITION = _rule(
    "OXE0003",
    "decomposition",
    Level.NOTE,
    template="Decomposed {count} operator(s) that have no ONNX function: {ops}.",
    short="Operators without an ONNX function were decomposed into simpler ATen operators.",
    full=(
        "The exporter decomposes only the operators that the ONNX function library does not "
        "implement. Fields: count (number of distinct operators decomposed), ops (their names, "
        "comma-separated)."
    ),
)
"""OXE0003: operators were decomposed. Example: ``DECOMPOSITION.fields == ("count", "ops")``."""

DISPATCH_DECISION = _rule(
    "OXE0004",
    "dispatch-decision",
    Level.NOTE,
    template="Translated {op} with {function}: {reason}.",
    short="The dispatcher chose an ONNX function for an operator.",
    full=(
        "Records which ONNX function translates an ATen operator and why it was chosen. "
        "Fields: op (the operator, e.g. 'aten::add.Tensor'), function (the chosen ONNX function), "
        "reason (why this function matched: dtypes, complex inputs, a user registration)."
    ),
)
"""OXE0004: a dispatch decision. Example: ``DISPATCH_DECISION.default_level is Level.NOTE``."""

DISPATCH_FALLBACK = _rule(
    "OXE0005",
    "dispatch-fallback",
    Level.WARNING,
    template="No exact ONNX function matched {op}; fell back to {function}: {reason}.",
    short="The dispatcher used a fallback ONNX function for an operator.",
    full=(
        "No overload matched the operator's inputs exactly, so a less specific function was "
        "used; the result may be slower or, rarely, less precise. Fields: op (the operator), "
        "function (the fallback ONNX function), reason (why no exact match was found)."
    ),
)
"""OXE0005: a dispatch fallback. Example: ``DISPATCH_FALLBACK.default_level is Level.WARNING``."""

UNSUPPORTED_OP = _rule(
    "OXE0006",
    "unsupported-op",
    Level.ERROR,
    template="No ONNX function is registered for {op} (node {node} in module {module}).",
    short="An operator in the captured program has no ONNX translation.",
    full=(
        "The operator has no function in the ONNX function library and could not be decomposed. "
        "Every such node is reported, each at the source line that created it. Fields: op (the "
        "operator), node (the FX node name), module (the nn.Module scope of the node)."
    ),
)
"""OXE0006: an operator has no translation. Example: ``UNSUPPORTED_OP.id == "OXE0006"``."""

CONVERSION_FAILED = _rule(
    "OXE0007",
    "conversion-failed",
    Level.ERROR,
    template="Translating node {node} ({op}) with {function} failed: {exception_message}",
    short="An ONNX function raised while translating a node.",
    full=(
        "A function for the operator exists, but calling it on this node's inputs raised. "
        "Fields: op (the operator), node (the FX node name), function (the ONNX function that "
        "raised), exception_message (the exception's message)."
    ),
)
"""OXE0007: a translation raised. Example: ``CONVERSION_FAILED.id == "OXE0007"``."""

OPTIMIZER_PASS = _rule(
    "OXE0008",
    "optimizer-pass",
    Level.NOTE,
    template="Optimizer pass {pass_name} changed the model: {nodes_before} -> {nodes_after} nodes.",
    short="An optimizer pass changed the ONNX model.",
    full=(
        "Reported for each optimization pass that modified the model. Fields: pass_name (the "
        "pass), nodes_before and nodes_after (node counts of the main graph around the pass)."
    ),
)
"""OXE0008: an optimizer pass ran. Example: ``OPTIMIZER_PASS.fields[0] == "pass_name"``."""

OPTIMIZATION_FAILED = _rule(
    "OXE0009",
    "optimization-failed",
    Level.ERROR,
    template="Optimizing the ONNX model failed: {exception_message}",
    short="The ONNX optimizer raised.",
    full=(
        "An optimization or rewrite pass raised an exception. Fields: exception_message (the "
        "exception's message)."
    ),
)
"""OXE0009: the optimizer raised. Example: ``OPTIMIZATION_FAILED.id == "OXE0009"``."""

MODEL_SAVED = _rule(
    "OXE0010",
    "model-saved",
    Level.NOTE,
    template="Saved the ONNX model to {path} ({size} bytes).",
    short="The ONNX model was written to disk.",
    full="Fields: path (the model file), size (total bytes written, external data included).",
)
"""OXE0010: the model was saved. Example: ``MODEL_SAVED.fields == ("path", "size")``."""

SERIALIZATION_FAILED = _rule(
    "OXE0011",
    "serialization-failed",
    Level.ERROR,
    template="Writing the ONNX model to {path} failed: {exception_message}",
    short="The ONNX model could not be written.",
    full=(
        "Serializing the model or writing it (or its external data) raised. Fields: path (the "
        "target file), exception_message (the exception's message)."
    ),
)
"""OXE0011: saving failed. Example: ``SERIALIZATION_FAILED.id == "OXE0011"``."""

VERIFICATION_RESULT = _rule(
    "OXE0012",
    "verification-result",
    Level.NOTE,
    template=(
        "Output {output} agrees with PyTorch: max absolute error {max_abs_error}, "
        "max relative error {max_rel_error}."
    ),
    short="An output of the ONNX model was compared with PyTorch and is within tolerance.",
    full=(
        "Fields: output (the output's name or index), max_abs_error and max_rel_error (the "
        "largest absolute and relative differences from the PyTorch result)."
    ),
)
"""OXE0012: verification passed. Example: ``VERIFICATION_RESULT.id == "OXE0012"``."""

VERIFICATION_MISMATCH = _rule(
    "OXE0013",
    "verification-mismatch",
    Level.ERROR,
    template=(
        "Node {node} ({op}, translated by {function}) differs from PyTorch: max absolute error "
        "{max_abs_error}, max relative error {max_rel_error}."
    ),
    short="A value computed by the ONNX model differs from PyTorch beyond tolerance.",
    full=(
        "Reported at the first node whose ONNX result differs from eager PyTorch. Fields: node "
        "(the FX node name), op (its operator), function (the ONNX function that translated it), "
        "max_abs_error and max_rel_error (the largest absolute and relative differences)."
    ),
)
"""OXE0013: verification failed. Example: ``VERIFICATION_MISMATCH.id == "OXE0013"``."""

PYTHON_WARNING = _rule(
    "OXE0014",
    "python-warning",
    Level.WARNING,
    template="{category}: {message}",
    short="Python code raised a warning during the export.",
    full=(
        "A warnings.warn call (usually from PyTorch or the model's code) ran while the exporter "
        "recorded warnings. Fields: category (the warning class name), message (its text)."
    ),
)
"""OXE0014: a Python warning. Example: ``PYTHON_WARNING.fields == ("category", "message")``."""

LOG_RECORD = _rule(
    "OXE0015",
    "log-record",
    Level.NOTE,
    template="[{logger}] {message}",
    short="A library logged a message during the export.",
    full=(
        "A logging record from a logger the exporter listens to. Logged errors become warnings "
        "(libraries log errors they recover from); only CRITICAL records become errors. "
        "Fields: logger (the logger name), message (the formatted log message)."
    ),
)
"""OXE0015: a log record. Example: ``LOG_RECORD.fields == ("logger", "message")``."""

BUFFER_MUTATION = _rule(
    "OXE0016",
    "buffer-mutation",
    Level.NOTE,
    template="Buffer {buffer} is mutated in place by the model's forward().",
    short="The model updates a registered buffer while it runs.",
    full=(
        "ONNX models are stateless, so an in-place update to a buffer (for example a batch-norm "
        "running mean in training mode) does not persist between runs of the ONNX model. "
        "Fields: buffer (the buffer's fully qualified name)."
    ),
)
"""OXE0016: a buffer is mutated. Example: ``BUFFER_MUTATION.fields == ("buffer",)``."""

UNSUPPORTED_HIGHER_ORDER_OP = _rule(
    "OXE0017",
    "unsupported-higher-order-op",
    Level.ERROR,
    template="Higher-order operator {op} (node {node}) cannot be translated to ONNX.",
    short="A higher-order operator (control flow, wrapped subgraph) has no ONNX translation.",
    full=(
        "Higher-order operators such as torch.cond, while_loop, map or wrapped subgraphs need "
        "special translation; this one has none. Fields: op (the higher-order operator), node "
        "(the FX node name)."
    ),
)
"""OXE0017: an unsupported higher-order op. Example: ``UNSUPPORTED_HIGHER_ORDER_OP.id``."""

EXPORT_FAILED = _rule(
    "OXE0018",
    "export-failed",
    Level.ERROR,
    template="Export failed during {stage}: {exception_message}",
    short="The export failed; this is the root cause.",
    full=(
        "The summary of a failed export: the stage that failed and the exception that stopped "
        "it. Other results in the same report give the details. Fields: stage (capture, "
        "decomposition, translation, optimization, serialization or verification), "
        "exception_message (the root-cause message)."
    ),
)
"""OXE0018: the export failed. Example: ``EXPORT_FAILED.fields == ("stage", ...)``."""

INPUT_MISMATCH = _rule(
    "OXE0019",
    "input-mismatch",
    Level.ERROR,
    template="The inputs do not match what the model was exported with: {detail}",
    short="Inputs given to the exported model do not match the exported signature.",
    full=(
        "The nested inputs differ in structure, count, dtype, rank or constant values from those "
        "the model was exported with. Fields: detail (what was expected and what came)."
    ),
)
"""OXE0019: inputs do not match. Example: ``INPUT_MISMATCH.id == "OXE0019"``."""

DYNAMIC_SHAPE_FIXED = _rule(
    "OXE0020",
    "dynamic-shape-fixed",
    Level.WARNING,
    template="Dynamic dimension {dim} changed to capture the model: {change} ({reason})",
    short="A dimension marked dynamic was changed as torch.export suggested.",
    full=(
        "torch.export reported that the model specialises a dimension marked dynamic (to a "
        "constant, or ties it to another dimension), and the exporter applied torch.export's "
        "suggested fix and captured again. Fields: dim (input path and axis, e.g. x[0]), "
        "change (before -> after), reason (torch.export's explanation)."
    ),
)
"""OXE0020: a dynamic dim was repaired. Example: ``DYNAMIC_SHAPE_FIXED.id == "OXE0020"``."""

STAGE_TIMES = _rule(
    "OXE0021",
    "stage-times",
    Level.NOTE,
    template="The export took {total} s: {stages}.",
    short="Where the export's time went, stage by stage.",
    full=(
        "Wall time of each stage of a successful export, in the order they ran (the same "
        "seconds as ONNXProgram.stage_times; saving comes later and is not in it). Fields: "
        "total (seconds from the call to the end of the export), stages (each stage and "
        "its seconds, e.g. 'capture 0.210 s, translation 0.069 s'). The result's "
        "properties hold the same numbers: stage_seconds (stage to seconds) and "
        "total_seconds."
    ),
)
"""OXE0021: per-stage export time. Example: ``STAGE_TIMES.fields == ("total", "stages")``."""

PARITY_MISMATCH = _rule(
    "OXE0022",
    "parity-mismatch",
    Level.WARNING,
    template=(
        "ONNX Runtime's outputs differ from eager PyTorch ({reference}) on the example inputs: "
        "{outputs}. {cause}"
    ),
    short="The export's parity check found outputs that differ from eager PyTorch.",
    full=(
        "After exporting, the exporter ran ONNX Runtime and the model itself (in eval mode, "
        "under torch.no_grad(), as it is deployed) on the example inputs, and some outputs "
        "differ beyond tolerance. The export still returns its program; the file computes "
        "other numbers than the model. Fields: reference (what eager PyTorch ran), outputs "
        "(each differing output and its largest absolute error), cause (the first diverging "
        "node at the model's line, or the model's eager path that differs from the traced "
        "one, or the training mode). The result's location is that node's line when known."
    ),
)
"""OXE0022: the default parity check failed. Example: ``PARITY_MISMATCH.id == "OXE0022"``."""

PARITY_SKIPPED = _rule(
    "OXE0023",
    "parity-skipped",
    Level.NOTE,
    template="The parity check against eager PyTorch did not run: {reason}",
    short="The export's default parity check was skipped, and why.",
    full=(
        "With ExportOptions(verify=None) (the default) the exporter compares ONNX Runtime with "
        "eager PyTorch only where that is cheap and meaningful: not for models with more "
        "weights than the limit, fake or meta weights, or random operators. Fields: reason "
        "(why it was skipped and how to force it: ExportOptions(verify=True) or "
        "ONNXProgram.verify)."
    ),
)
"""OXE0023: the parity check was skipped. Example: ``PARITY_SKIPPED.fields == ("reason",)``."""

INVALID_GRAPH = _rule(
    "OXE0024",
    "invalid-graph",
    Level.ERROR,
    template="The ONNX graph is invalid at node {node} ({op}): {reason}",
    short="The exported ONNX graph fails the ONNX checker or ONNX Runtime's graph checks.",
    full=(
        "Before a model is saved (and before the export's parity check runs it), the graph is "
        "checked with onnx.checker (full check: strict shape and type inference) and, for "
        "small models, by building an ONNX Runtime session. A failure is a translation bug: "
        "the file would be refused by ONNX Runtime. Fields: node (the ONNX node's name), op "
        "(its operator), reason (the checker's or ONNX Runtime's message). The result's "
        "location is the model's line the node was translated from."
    ),
)
"""OXE0024: the graph is invalid. Example: ``INVALID_GRAPH.fields == ("node", "op", "reason")``."""

TRAINING_MODE = _rule(
    "OXE0025",
    "training-mode",
    Level.WARNING,
    template="The model is exported in training mode: {modules}",
    short="Modules whose computation depends on training mode were exported in training mode.",
    full=(
        "The model (or some of its submodules) had training=True during the export, and the "
        "captured graph holds operations of training mode (batch statistics in batch norm, "
        "random dropout masks). The file then computes what model.train() computes, not what "
        "model.eval() does. Fields: modules (each module's path, class and what differs)."
    ),
)
"""OXE0025: exported in training mode. Example: ``TRAINING_MODE.fields == ("modules",)``."""

CAPTURE_PATCHES = _rule(
    "OXE0026",
    "capture-patches",
    Level.NOTE,
    template="Capture ran with {count} patch(es) of library code: {patches}.",
    short="The patches of library code that capture ran with.",
    full=(
        "Capture rewrites some library code (torch's, transformers') for the time of one "
        "torch.export call, so that code torch.export cannot trace as written is traced as "
        "it computes eagerly; each such patch is listed in capture/patches/ with its targets, "
        "the releases it was tested against and why it exists (onnx-export doctor prints the "
        "table). This note lists those that took part in the export. Fields: count, patches "
        "(their names). The result's properties hold the names as a list (patches)."
    ),
)
"""OXE0026: the patches capture ran with. Example: ``CAPTURE_PATCHES.id == "OXE0026"``."""

CAPTURE_PATCH_SKIPPED = _rule(
    "OXE0027",
    "capture-patch-skipped",
    Level.NOTE,
    template="Capture patch {patch} was skipped: {reason}.",
    short="A patch of library code was left out because its target is missing or changed.",
    full=(
        "A patch of capture/patches/ targets library code that the installed release does "
        "not have, or has with another signature; rather than fail inside the export, the "
        "capture runs without it. Models that needed it may fail to capture or differ from "
        "eager PyTorch. Fields: patch (its name), reason (the target and what changed)."
    ),
)
"""OXE0027: a capture patch was skipped. Example: ``CAPTURE_PATCH_SKIPPED.id == "OXE0027"``."""

ALL_RULES: tuple[Rule, ...] = (
    CAPTURE_ATTEMPT_FAILED,
    CAPTURE_SUCCEEDED,
    DECOMPOSITION,
    DISPATCH_DECISION,
    DISPATCH_FALLBACK,
    UNSUPPORTED_OP,
    CONVERSION_FAILED,
    OPTIMIZER_PASS,
    OPTIMIZATION_FAILED,
    MODEL_SAVED,
    SERIALIZATION_FAILED,
    VERIFICATION_RESULT,
    VERIFICATION_MISMATCH,
    PYTHON_WARNING,
    LOG_RECORD,
    BUFFER_MUTATION,
    UNSUPPORTED_HIGHER_ORDER_OP,
    EXPORT_FAILED,
    INPUT_MISMATCH,
    DYNAMIC_SHAPE_FIXED,
    STAGE_TIMES,
    PARITY_MISMATCH,
    PARITY_SKIPPED,
    INVALID_GRAPH,
    TRAINING_MODE,
    CAPTURE_PATCHES,
    CAPTURE_PATCH_SKIPPED,
)
"""Every rule of the exporter, in id order.

Example:
    >>> [rule.id for rule in ALL_RULES][:3]
    ['OXE0001', 'OXE0002', 'OXE0003']
"""


def get_rule(rule_id: str) -> Rule:
    """Returns the rule with id ``rule_id`` from :data:`ALL_RULES`.

    Args:
        rule_id: A rule id such as ``"OXE0006"``.

    Raises:
        KeyError: If no rule has that id; the message lists the known ids.

    Example:
        >>> get_rule("OXE0018").name
        'export-failed'
    """
    for rule in ALL_RULES:
        if rule.id == rule_id:
            return rule
    known = ", ".join(rule.id for rule in ALL_RULES)
    raise KeyError(f"No rule has id {rule_id!r}. Known ids: {known}.")
