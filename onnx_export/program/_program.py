"""``ONNXProgram``: the exported model, how it was made, and how to save and run it."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pathlib
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from onnx_export._fake import (
    ModelState,
    WeightPlaceholder,
    WeightsError,
    attached,
    missing_message,
    open_model_state,
    real_tensors,
    resolve_weights,
    state_names,
    weight_values,
)
from onnx_export.adapters import (
    METADATA_KEY,
    AdapterSpec,
    InputAdapter,
    InvalidModelError,
    MissingKernelError,
    OnnxModule,
    canonicalize_inputs,
)
from onnx_export.adapters._runtime import describe_leaf, shape_text, short_list
from onnx_export.adapters._session_checks import quiet_session_options
from onnx_export.adapters._upcast import UPCAST_DTYPES
from onnx_export.capture._strategies import CaptureAttempt, captured_call
from onnx_export.diagnostics import DiagnosticContext, rules
from onnx_export.errors import InvalidGraphError, SerializationError
from onnx_export.program._check import (
    check_graph,
    invalid_graph_error,
    record_invalid_graph,
    session_check_wanted,
)
from onnx_export.program._modes import (
    DEPLOYED_MODE,
    TrainingComputation,
    kept,
    mutated_buffers,
    path_cause,
    run_deployed,
    training_computations,
)
from onnx_export.program._save_errors import save_advice, save_cause
from onnx_export.program._serialize import PROTOBUF_LIMIT, initializer_bytes, save_model
from onnx_export.program._session import open_session_module
from onnx_export.program._structure import structure_difference
from onnx_export.program._ties import TIES_CAUSE, has_topk, lowest_index_topk
from onnx_export.program._verify import (
    OnnxRuntimeRunError,
    VerificationResult,
    compare,
    find_culprit,
    run_eager,
    run_model,
)
from onnx_export.reporting._records import origin_locations
from onnx_export.translation._dispatch import Dispatch
from onnx_export.translation._naming import names_for_signature

__all__ = ["ONNXProgram"]

#: ONNX Runtime's words for a graph that is wrong (types, shapes), not one it cannot run
#: here (a custom op without its library, a kernel missing on this provider).
_REFUSES_THE_GRAPH = re.compile(
    r"Type Error|TypeInferenceError|ShapeInferenceError|INVALID_GRAPH|[Ii]nconsistent|"
    r"does not match|[Ii]nvalid model"
)


@dataclasses.dataclass(frozen=True)
class EagerAtSecondSize:
    """Eager's outputs at a second size whose inputs lead with the example's.

    Lent by the export's check at a second size (``_served_axes``) to its parity check
    at the example, which uses their leading slice as its reference where ONNX Runtime
    agrees with it (:meth:`ONNXProgram._from_second_size`).

    Attributes:
        example: The example call ``(args, kwargs)`` the second size was made from.
        outputs: The model's outputs at the second size, as the model returned them.
    """

    example: tuple[tuple[Any, ...], dict[str, Any]]
    outputs: Any


class ONNXProgram:
    """An exported ONNX model with the program it came from.

    Attributes:
        model: The ONNX model as an ``onnx_ir.Model`` (edit it in place if you like).
        exported_program: The ``torch.export.ExportedProgram`` that was translated.
        capture_attempts: Every capture strategy tried, in order.
        adapter_spec: How the model's nested inputs and outputs map to the ONNX graph's;
            saved in the model file so that :func:`onnx_export.load` can call it as the
            PyTorch model is called.
        diagnostic_context: What the export recorded (and, later, saving and
            verification); write it with :meth:`save_diagnostics`.
        stage_times: Wall seconds of each export stage (``capture``, ``decomposition``,
            ``translation``, ``optimizer``, ``folding``, ``ort_target``, ``adapter``, ...)
            in the order they ran; each :meth:`save` adds its seconds to ``save`` (and
            sets ``check``, the part of them its graph check took).

    The constructor's ``eager_model`` is the model the export was called with:
    :meth:`verify` compares ONNX Runtime with it as it is deployed (eval mode, no grad).

    Example:
        >>> import torch, onnx_export
        >>> program = onnx_export.dynamo_export(torch.nn.ReLU(), torch.randn(2, 3))
        >>> program(torch.randn(2, 3)).shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        model: ir.Model,
        exported_program: ExportedProgram | None,
        *,
        capture_attempts: Sequence[CaptureAttempt] = (),
        signature: inspect.Signature | None = None,
        diagnostic_context: DiagnosticContext | None = None,
        decisions: dict[str, Dispatch] | None = None,
        adapter_spec: AdapterSpec | None = None,
        stage_times: Mapping[str, float] | None = None,
        eager_model: torch.nn.Module | None = None,
    ) -> None:
        self.model = model
        self._eager_model = eager_model
        self.stage_times: dict[str, float] = dict(stage_times or {})
        self.exported_program = exported_program
        self.capture_attempts = tuple(capture_attempts)
        self._signature = signature
        self.diagnostic_context = diagnostic_context or DiagnosticContext("onnx-export", "0.1.0")
        self._decisions = decisions or {}
        self.adapter_spec = adapter_spec
        # Calls in this process rebuild the model's own output classes (namedtuples,
        # dataclasses, ModelOutput, caches): they came from the user's code, not a file.
        self._allowed_classes: tuple[type, ...] = _output_classes(exported_program)
        self._module: OnnxModule | None = None
        self._session_weights: list[Any] = []  # what the session was handed (kept alive)
        self._inputs: InputAdapter | None = None
        self._session_lock = threading.Lock()
        self._eager_hint: EagerAtSecondSize | None = None  # for the export's parity check

    def __repr__(self) -> str:
        graph = self.model.graph
        if self.adapter_spec is not None:
            inputs = [describe_leaf(leaf) for leaf in self.adapter_spec.inputs]
        else:
            inputs = [_describe_value(v) for v in graph.inputs]
        outputs = [_describe_value(v) for v in graph.outputs]
        return (
            f"ONNXProgram(inputs={short_list(inputs)}, outputs={short_list(outputs)}, "
            f"nodes={graph.num_nodes()}, opset={graph.opset_imports.get('')}, "
            "providers=['CPUExecutionProvider'])"
        )

    @property
    def model_proto(self) -> onnx.ModelProto:
        """The model as an ``onnx.ModelProto`` (serialised anew on each access).

        Example:
            >>> import torch, onnx_export
            >>> program = onnx_export.dynamo_export(torch.nn.ReLU(), torch.randn(2))
            >>> program.model_proto.graph.node[0].op_type
            'Relu'
        """
        return ir.serde.serialize_model(self.model)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        external_data: bool | str | None = None,
        model_state: ModelState | None = None,
        progress: bool | None = None,
    ) -> pathlib.Path:
        """Write the model to ``path``, atomically, streaming the weights one at a time.

        Args:
            path: Destination ``.onnx`` file; missing folders are created.
            external_data: ``True`` puts the weights in ``<name>.data`` beside the model;
                a string names that file instead (relative, inside the model's folder);
                ``False`` keeps one file. By default (``None``) the weights go to
                ``<name>.data`` only when they would pass protobuf's 2 GB limit.
            model_state: The weights to write, by ``state_dict`` name: a state_dict
                (``Mapping[str, torch.Tensor]``), a ``.safetensors`` file, a folder of
                ``.safetensors`` shards, or a list of those. Required when the model was
                exported from fake or meta tensors (:func:`onnx_export.enable_fake_mode`);
                otherwise it replaces the exported weights of those names. Files are
                read one tensor at a time, never loaded whole.
            progress: Show a progress bar (bytes written) on stderr; by default only when
                stderr is a terminal and the weights take 64 MB or more.

        Returns:
            The absolute path written.

        Raises:
            SerializationError: When the file cannot be written, when weights have no
                data (a fake export saved without ``model_state``), or when
                ``model_state`` lacks weights, has unknown ones, or has other dtypes or
                shapes (all are named); an earlier file at ``path`` is left as it was.
            InvalidGraphError: The graph fails ``onnx.checker`` (full check: strict type
                and shape inference) or, for models with at most 64 MB of weights, ONNX
                Runtime's session build; it names the node, its op and the model's line,
                and nothing is written. (The session is kept for later calls.)

        Example:
            >>> import tempfile, pathlib, torch, onnx_export
            >>> program = onnx_export.dynamo_export(torch.nn.ReLU(), torch.randn(2))
            >>> out = program.save(pathlib.Path(tempfile.mkdtemp()) / "relu.onnx")
            >>> out.exists()
            True
        """
        start = time.perf_counter()
        if self.adapter_spec is not None:
            self.model.metadata_props[METADATA_KEY] = self.adapter_spec.to_json()
        self._check(session=model_state is None)  # nothing is written for an invalid graph
        self.stage_times["check"] = time.perf_counter() - start
        try:
            with real_tensors():  # saving inside enable_fake_mode() must not fake the weights
                weights = self._weights_to_attach(model_state)
            with real_tensors(), attached(weights):
                written, _ = save_model(
                    self.model, path, external_data=external_data, progress=progress
                )
        except (OSError, ValueError) as e:
            self.diagnostic_context.emit(
                rules.SERIALIZATION_FAILED,
                message_args={"path": os.fspath(path), "exception_message": str(e)},
                exception=e,
            )
            raise SerializationError(
                f"Could not save the ONNX model to {os.fspath(path)!r}: {save_cause(e)}. "
                f"{save_advice(e)}Any earlier file there is unchanged."
            ) from e
        self.diagnostic_context.emit(
            rules.MODEL_SAVED, message_args={"path": str(written), "size": written.stat().st_size}
        )
        seconds = self.stage_times.get("save", 0.0) + time.perf_counter() - start
        self.stage_times["save"] = seconds
        return written

    def _check(self, *, session: bool) -> None:
        """ONNX's full checker, and an ONNX Runtime session build when the model is small.

        Raises:
            InvalidGraphError: Either refuses the graph (recorded as OXE0024).
        """
        try:
            check_graph(self.model)  # False for ONNX Runtime's own ops: its session checks them
            fake = any(
                isinstance(v.const_value, WeightPlaceholder)
                for v in weight_values(self.model).values()
            )
            if session and not fake and self._module is None and session_check_wanted(self.model):
                try:
                    self._onnx_module()
                except (MissingKernelError, SerializationError):
                    pass  # a valid graph the CPU provider cannot run (bfloat16), or over 2 GB
                except Exception as e:  # InvalidModelError, or onnxruntime's own classes
                    said = str((e.__cause__ if isinstance(e, InvalidModelError) else None) or e)
                    if not _REFUSES_THE_GRAPH.search(said):
                        return  # not the graph: a custom op this runtime lacks, say
                    raise invalid_graph_error(self.model, said, "ONNX Runtime") from e
        except InvalidGraphError as error:
            record_invalid_graph(self.diagnostic_context, error)
            raise

    def _weights_to_attach(self, model_state: ModelState | None) -> dict[ir.Value, Any]:
        """The data to write for each weight; ``WeightsError`` when it does not fit."""
        known, transient = state_names(self.exported_program)
        if model_state is None:
            missing = [
                name
                for name, v in weight_values(self.model).items()
                if isinstance(v.const_value, WeightPlaceholder)
            ]
            if missing:
                raise WeightsError(missing_message(missing, transient, given=False))
            return {}
        tensors = open_model_state(model_state)
        return resolve_weights(self.model, tensors, known=known, transient=transient)

    def save_diagnostics(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Write what the export recorded as a SARIF 2.1.0 report (atomically).

        Example:
            >>> import tempfile, pathlib, torch, onnx_export
            >>> program = onnx_export.dynamo_export(torch.nn.ReLU(), torch.randn(2))
            >>> report = program.save_diagnostics(pathlib.Path(tempfile.mkdtemp()) / "r.sarif")
            >>> report.suffix
            '.sarif'
        """
        return self.diagnostic_context.write_sarif(path)

    # -- running -----------------------------------------------------------------------

    def _canonical(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return canonicalize_inputs(self._signature, args, kwargs)

    def _onnx_module(self) -> OnnxModule:
        with self._session_lock:
            if self._module is None:
                if initializer_bytes(self.model) > PROTOBUF_LIMIT:
                    raise SerializationError(
                        "The model is over 2 GB; save() it (with external data) and run the "
                        "saved file with onnx_export.load(path)."
                    )
                # Without copying the weights through protobuf (the serialized model
                # where that route fails): the same session.
                self._module, self._session_weights = open_session_module(
                    self.model, self.adapter_spec, self._allowed_classes
                )
            return self._module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model in ONNX Runtime (CPU), called exactly as the PyTorch model is.

        Inputs go through the export's input adapter (nesting, ``None``, keyword
        arguments, constants checked); outputs come back in the model's own structure
        (dict keys, tuples, lists; other classes as dicts). Torch tensors in give torch
        tensors out, numpy arrays in give numpy arrays out.

        Example:
            >>> import torch, onnx_export
            >>> program = onnx_export.dynamo_export(torch.nn.Tanh(), torch.randn(3))
            >>> x = torch.randn(3)
            >>> torch.allclose(program(x), torch.tanh(x), atol=1e-6)
            True
        """
        return self._onnx_module()(*args, **kwargs)

    def verify(
        self, *args: Any, rtol: float = 1e-4, atol: float = 1e-5, **kwargs: Any
    ) -> VerificationResult:
        """Compare ONNX Runtime with eager PyTorch on these inputs; find the culprit if not.

        The inputs are checked first, exactly as a call checks them (nesting, dtypes,
        static sizes, constants), so ill-fitting inputs raise the same typed errors
        (:class:`~onnx_export.adapters.InputShapeError`,
        :class:`~onnx_export.adapters.ConstantMismatchError`, ...) before anything runs.
        Eager PyTorch then runs the captured program (``exported_program.module()``), whose
        guards refuse inputs outside the export's conditions, and the model itself as it
        is deployed: in eval mode under ``torch.no_grad()`` (its training flags and the
        buffers the program updates are put back afterwards). ONNX Runtime is compared
        with the deployed model (with the captured program when the export was given an
        ``ExportedProgram``, or the model's outputs have another structure). Outputs of
        any dtype are compared: float16, bfloat16 and float8 in float32 with tolerances of
        at least their dtype's precision (see :class:`OutputComparison`),
        complex as real views, integers and bools exactly. Each output's max absolute and
        relative error is recorded in :attr:`diagnostic_context`. When an output is
        beyond ``atol + rtol * |expected|``, the first FX node whose ONNX value diverges
        is found and reported as an error at the user's source line, with its op and
        ONNX function. When ONNX Runtime agrees with the captured program but not with
        the deployed model, no node is to blame: ``result.cause`` says why (a PyTorch
        fast path taken only in eval mode under no_grad, such as
        ``nn.TransformerEncoder``'s nested tensors for a padding mask; or training
        mode). A bfloat16/float16 model that ONNX Runtime's CPU provider cannot
        run is run computing in float32 (``upcast``), which ``result.note`` says.

        Raises:
            InputError: A subclass naming the input that does not fit the export.

        Example:
            >>> import torch, onnx_export
            >>> program = onnx_export.dynamo_export(torch.nn.GELU(), torch.randn(4))
            >>> program.verify(torch.randn(4)).ok
            True
        """
        result = self._compare(args, kwargs, rtol, atol, traced_first=True)
        self._record_verification(result)
        return result

    def _check_parity(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], rtol: float, atol: float
    ) -> VerificationResult:
        """:meth:`verify` on the example inputs, recording nothing (the export records)."""
        return self._compare(args, kwargs, rtol, atol, traced_first=False)

    def _lend_eager(self, hint: EagerAtSecondSize) -> None:
        """Keep eager's outputs at a second size for the parity check (used once)."""
        self._eager_hint = hint

    def _from_second_size(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        got: Sequence[Any],
        tolerances: tuple[float, float],
    ) -> list[torch.Tensor] | None:
        """Eager's outputs at a second size, sliced to the example's, where ONNX Runtime's match.

        The second size repeats the example along the axes it grows, so eager's outputs
        there lead with the example's where the model keeps its rows apart (a batch). When
        ONNX Runtime's outputs at the example match that leading slice within tolerance,
        they match eager at the example: the file sees only the example's values, and
        cannot give what eager gives for the larger inputs unless the two agree. Then no
        eager run at the example is needed (on whisper's encoder, a fifth of the export).
        ``None`` (eager runs at the example, as before) for other inputs, another output
        structure or shape, or any output beyond tolerance (a model that mixes rows, or a
        file that is wrong: the usual check then decides).
        """
        hint, self._eager_hint = self._eager_hint, None
        if hint is None or not _same_values((args, kwargs), hint.example):
            return None
        program = self.exported_program
        assert program is not None  # checked by _compare
        if structure_difference(hint.outputs, program.call_spec.out_spec):
            return None
        leaves = _tensors(hint.outputs)
        if len(leaves) != len(got):
            return None
        sliced = []
        for want, value in zip(leaves, got, strict=True):
            shape = tuple(np.shape(value))
            if want.dim() != len(shape) or any(
                w < n for w, n in zip(want.shape, shape, strict=True)
            ):
                return None
            sliced.append(want[tuple(slice(0, n) for n in shape)])
        names = [str(i) for i in range(len(got))]
        return sliced if all(o.ok for o in compare(names, sliced, got, *tolerances)) else None

    def _training(self) -> list[TrainingComputation]:
        """What training mode put into the graph (empty in eval mode or without a model)."""
        if self._eager_model is None or self.exported_program is None:
            return []
        return training_computations(self._eager_model, self.exported_program)

    def _compare(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        rtol: float,
        atol: float,
        *,
        traced_first: bool,
    ) -> VerificationResult:
        """ONNX Runtime against the model as deployed; the cause when they disagree.

        ``traced_first`` runs the captured program first, so that inputs outside its
        guards raise a typed error before the model runs (not needed on the example).
        """
        program = self.exported_program
        if program is None:
            raise ValueError("verify() needs the exported program; this ONNXProgram has none.")
        flat = self._input_adapter()(*args, **kwargs)  # typed errors before anything runs
        # The program takes the call it was captured with (positional stays positional).
        canonical = captured_call(program, self._signature, *self._canonical(args, kwargs))
        traced = self._traced(canonical) if traced_first else None
        module, note = self._verification_module()
        try:
            got = module._run_flat(list(flat))
        except Exception as e:  # onnxruntime's own classes, or our adapters' errors
            if traced_first:
                raise  # verify(): the caller's inputs, the caller's error
            raise OnnxRuntimeRunError(f"{type(e).__name__}: {e}") from e
        # The export's own check: eager's outputs at a second size may be the reference.
        lent = None if traced_first else self._from_second_size(args, kwargs, got, (rtol, atol))
        expected, reference, structure = (
            (lent, DEPLOYED_MODE, "")
            if lent is not None
            else self._reference(args, kwargs, len(got))
        )
        if expected is None:
            traced = traced if traced is not None else self._traced(canonical)
            expected, reference = traced, "the exported program (exported_program.module())"
        outputs = compare(module.output_names, expected, got, rtol, atol)
        if structure:  # the numbers are compared in the program's order: no node to blame
            cause = f"the exported program's output structure differs from eager's ({structure})"
            return VerificationResult(outputs, None, note, reference, cause, structure)
        if all(o.ok for o in outputs):
            return VerificationResult(outputs, None, note, reference)
        if self._eager_model is not None and has_topk(program):
            with lowest_index_topk():
                tied, _, _ = self._reference(args, kwargs, len(got))
            if tied is not None and all(
                o.ok for o in compare(module.output_names, tied, got, rtol, atol)
            ):
                return VerificationResult(outputs, None, note, reference, TIES_CAUSE)
        if traced is None:
            traced = self._traced(canonical)
        if expected is not traced and all(
            o.ok for o in compare(module.output_names, traced, got, rtol, atol)
        ):
            assert self._eager_model is not None  # a deployed reference ran
            cause = path_cause(self._eager_model, self._training())
            return VerificationResult(outputs, None, note, reference, cause)
        feed = self._captured_order(dict(zip(module.input_names, flat, strict=True)))
        upcast = list(module._upcast)

        def run(model: ir.Model, feed: dict[str, Any]) -> list[Any]:
            return run_model(model, feed, upcast)

        try:
            culprit = find_culprit(program, self._decisions, canonical, feed, run, rtol, atol)
        except Exception as e:  # the search for a culprit must not hide the mismatch found
            first = (str(e).strip().splitlines() or [""])[0]
            cause = (
                "the search for the first diverging node failed "
                f"({type(e).__name__}: {first}); the outputs differ all the same"
            )
            return VerificationResult(outputs, None, note, reference, cause)
        return VerificationResult(outputs, culprit, note, reference)

    def _captured_order(self, feed: dict[str, Any]) -> dict[str, Any]:
        """``feed`` in the captured program's order of inputs.

        The culprit search's debug graph names its inputs positionally, in that order;
        keyword inputs may come in another.
        """
        if self._signature is None or self.exported_program is None:
            return feed
        try:
            _, names, _ = names_for_signature(self._signature, self.exported_program)
        except Exception:  # a call torch captured in a form the names do not follow
            return feed
        if sorted(names) != sorted(feed):
            return feed
        return {name: feed[name] for name in names}

    def _traced(self, canonical: tuple[tuple[Any, ...], dict[str, Any]]) -> list[torch.Tensor]:
        """The captured program's outputs; the buffers it updates are put back after."""
        assert self.exported_program is not None  # checked by _compare
        with kept(mutated_buffers(self.exported_program)):
            return _tensors(run_eager(self.exported_program, canonical))

    def _reference(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], count: int
    ) -> tuple[list[torch.Tensor] | None, str, str]:
        """The model's outputs as deployed, the reference's name, the structure difference.

        The outputs are ``None`` without a model or when their count differs; the
        difference is where eager's output structure departs from the program's.
        """
        if self._eager_model is None:
            return None, "", ""
        eager = run_deployed(self._eager_model, args, kwargs, self.exported_program)
        assert self.exported_program is not None  # checked by _compare
        structure = structure_difference(eager, self.exported_program.call_spec.out_spec)
        outputs = _tensors(eager)
        return (outputs if len(outputs) == count else None), DEPLOYED_MODE, structure

    def _narrow_inputs(self, spec: AdapterSpec) -> None:
        """Take ``spec`` (the same leaves, narrower input ranges) for every later call."""
        with self._session_lock:
            self.adapter_spec = spec
            self._inputs = None
            if self._module is not None:
                self._module._narrow_inputs(spec)

    def _input_adapter(self) -> InputAdapter:
        if self._inputs is None:
            if self.adapter_spec is None:
                raise ValueError("verify() needs the adapter spec; this ONNXProgram has none.")
            self._inputs = InputAdapter(self.adapter_spec)
        return self._inputs

    def _verification_module(self) -> tuple[OnnxModule, str]:
        """The module to verify with; computing in float32 where CPU kernels are missing."""
        try:
            return self._onnx_module(), ""
        except MissingKernelError as error:
            if error.dtype not in UPCAST_DTYPES:
                raise
            narrow = [error.dtype]
        data = self.model_proto.SerializeToString()
        while True:  # a model may lack kernels for both bfloat16 and float16
            try:
                module = OnnxModule(
                    data,
                    self.adapter_spec,
                    allowed_classes=self._allowed_classes,
                    upcast=narrow,
                    session_options=quiet_session_options(importlib.import_module("onnxruntime")),
                )
                break
            except MissingKernelError as error:
                if error.dtype not in UPCAST_DTYPES or error.dtype in narrow:
                    raise
                narrow.append(error.dtype)
        note = (
            f"ONNX Runtime's CPU provider has no {' or '.join(narrow)} kernels for some ops of "
            f"this model, so it ran computing in float32 (upcast={narrow}); inputs and outputs "
            "kept their dtypes."
        )
        return module, note

    def _record_verification(self, result: VerificationResult) -> None:
        context = self.diagnostic_context
        for output in result.outputs:
            if output.ok:
                context.emit(
                    rules.VERIFICATION_RESULT,
                    message_args={
                        "output": output.name,
                        "max_abs_error": f"{output.max_abs_error:.3g}",
                        "max_rel_error": f"{output.max_rel_error:.3g}",
                    },
                    properties={
                        "dtype": output.dtype,
                        "rtol": output.rtol,
                        "atol": output.atol,
                        **({"note": result.note} if result.note else {}),
                    },
                )
        if result.ok:
            return
        bad = [o for o in result.outputs if not o.ok]
        culprit = result.culprit
        locations: tuple[Any, ...] = ()
        stacks: tuple[Any, ...] = ()
        if culprit is not None:
            locations, stacks = origin_locations(culprit.origin)
        context.emit(
            rules.VERIFICATION_MISMATCH,
            message_args={
                "node": culprit.node if culprit else bad[0].name,
                "op": culprit.op if culprit else "-",
                "function": culprit.function if culprit else "-",
                "max_abs_error": f"{(culprit or bad[0]).max_abs_error:.3g}",
                "max_rel_error": f"{(culprit or bad[0]).max_rel_error:.3g}",
            },
            locations=locations,
            stacks=stacks,
            properties={
                "outputs": {o.name: [o.max_abs_error, o.max_rel_error] for o in bad},
                **({"note": result.note} if result.note else {}),
            },
        )


def _describe_value(value: ir.Value) -> str:
    dtype = value.dtype.name.lower() if value.dtype is not None else "?"
    dtype = {"float": "float32", "double": "float64"}.get(dtype, dtype)
    dims = (
        None if value.shape is None else [d if isinstance(d, int) else str(d) for d in value.shape]
    )
    return f"{value.name}: {dtype}{shape_text(dims)}"


def _output_classes(program: ExportedProgram | None) -> tuple[type, ...]:
    """The non-builtin container classes of ``program``'s output structure."""
    if program is None:
        return ()
    found: list[type] = []
    stack = [program.call_spec.out_spec]
    while stack:
        spec = stack.pop()
        if spec is None or spec.is_leaf():
            continue
        cls = spec.type
        if isinstance(cls, type) and cls not in (tuple, list, dict) and cls not in found:
            found.append(cls)
        stack.extend(spec.children())
    return tuple(found)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _same_values(a: Any, b: Any) -> bool:
    """Whether two calls hold the same leaves: equal tensors (dtype, shape, values), equal rest."""
    left, right = pytree.tree_leaves(a), pytree.tree_leaves(b)
    if len(left) != len(right):
        return False
    for x, y in zip(left, right, strict=True):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (
                isinstance(x, torch.Tensor)
                and isinstance(y, torch.Tensor)
                and x.dtype == y.dtype
                and x.shape == y.shape
                and torch.equal(x, y)
            ):
                return False
        elif type(x) is not type(y) or not _equal(x, y):
            return False
    return True


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))
    try:
        return bool(x == y)
    except Exception:  # an object without a plain equality: not the same call for sure
        return False
