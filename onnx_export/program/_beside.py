"""ONNX Runtime beside eager PyTorch: the two runs of each check, at the same time.

Every check of an export (the parity check at the example, the served-axes check at a
second size, the edge probes) runs the file in ONNX Runtime and the model in eager
PyTorch on the same inputs, and neither run needs the other's result until the
comparison. ONNX Runtime releases the GIL while it computes, so its run goes to a worker
thread while eager PyTorch runs in the caller's thread (whose grad mode, autocast and
dispatch modes are thread-local: eager keeps the caller's). On the whisper encoder's
1,500 positions each run is about a second: side by side, a check costs the longer of the
two, not their sum (#39).

The worker's exception is kept and raised in the caller's thread when it asks for the
result, with its own type; the caller's thread always waits for the worker, so nothing
runs on after a check returns or raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Outcome", "beside", "workers_started"]

A = TypeVar("A")
B = TypeVar("B")


class _Count:
    started = 0  # worker threads started in this process


def workers_started() -> int:
    """How many worker runs :func:`beside` has started in this process (tests count them)."""
    return _Count.started


#: ``False`` runs the two calls one after the other in the caller's thread (the worker's
#: first): for benchmarks that compare, and for a process that wants no threads.
SIDE_BY_SIDE = True


class Outcome(Generic[A]):
    """What the worker's call returned or raised; :meth:`get` gives it back."""

    def __init__(self) -> None:
        self._value: A | None = None
        self._error: BaseException | None = None

    def get(self) -> A:
        """The value, or the worker's exception raised again (its own type)."""
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set when no error was

    @property
    def error(self) -> BaseException | None:
        """The worker's exception, or ``None``."""
        return self._error


def beside(worker: Callable[[], A], here: Callable[[], B]) -> tuple[Outcome[A], B]:
    """Run ``worker`` in a thread and ``here`` in this one; return both when both are done.

    ``here``'s exception propagates (after the worker has finished); the worker's is in
    the :class:`Outcome`.

    Example:
        >>> outcome, here = beside(lambda: 1 + 1, lambda: "eager")
        >>> outcome.get(), here
        (2, 'eager')
    """
    outcome: Outcome[A] = Outcome()

    def run() -> None:
        try:
            outcome._value = worker()
        except BaseException as e:  # handed to the caller's thread
            outcome._error = e

    if not SIDE_BY_SIDE:
        run()
        return outcome, here()
    thread = threading.Thread(target=run, name="onnx_export-check", daemon=True)
    _Count.started += 1
    thread.start()
    try:
        value = here()
    finally:
        thread.join()
    return outcome, value
