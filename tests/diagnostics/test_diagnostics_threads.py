"""Contexts share nothing: exports in different threads keep their own diagnostics."""

from __future__ import annotations

import threading

from onnx_export.diagnostics import DiagnosticContext, DiagnosticOptions, Level, Location, rules
from tests.sarif_helpers import assert_valid_sarif

THREADS = 8
PER_THREAD = 50


def test_each_thread_context_reports_only_its_own_diagnostics() -> None:
    barrier = threading.Barrier(THREADS)
    logs: dict[int, dict[str, object]] = {}
    failures: list[BaseException] = []

    def export(worker: int) -> None:
        try:
            context = DiagnosticContext(
                f"tool-{worker}", "1.0", DiagnosticOptions(verbosity=Level.NOTE)
            )
            barrier.wait()
            for step in range(PER_THREAD):
                context.emit(
                    rules.DISPATCH_DECISION,
                    message_args={"op": f"op{worker}", "function": f"fn{step}", "reason": "ok"},
                    locations=[Location(f"/w{worker}/model.py", line=step + 1)],
                    properties={"worker": worker},
                )
            context.finish(success=worker % 2 == 0)
            logs[worker] = context.to_sarif()
        except BaseException as error:  # pragma: no cover - reported below
            failures.append(error)

    threads = [threading.Thread(target=export, args=(worker,)) for worker in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert sorted(logs) == list(range(THREADS))
    for worker, log in logs.items():
        assert_valid_sarif(log)
        (run,) = log["runs"]
        assert run["tool"]["driver"]["name"] == f"tool-{worker}"
        assert len(run["results"]) == PER_THREAD
        assert {r["properties"]["worker"] for r in run["results"]} == {worker}
        assert {a["location"]["uri"] for a in run["artifacts"]} == {f"file:///w{worker}/model.py"}
        assert run["invocations"][0]["executionSuccessful"] is (worker % 2 == 0)


def test_one_context_can_be_shared_by_threads() -> None:
    context = DiagnosticContext("tool", "1.0")

    def log_many(worker: int) -> None:
        for step in range(PER_THREAD):
            context.emit(rules.INPUT_MISMATCH, message_args={"detail": f"{worker}-{step}"})

    threads = [threading.Thread(target=log_many, args=(worker,)) for worker in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    messages = {d.message.rsplit(": ", 1)[-1] for d in context.diagnostics}
    assert len(context.diagnostics) == THREADS * PER_THREAD
    assert messages == {f"{w}-{s}" for w in range(THREADS) for s in range(PER_THREAD)}
    assert_valid_sarif(context.to_sarif())
