"""Loading a folder into an :class:`Engine` and serving it with uvicorn until a signal."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline
from onnx_export.hf.runtime.generation._causal import OrtModelForCausalLM

from ._app import build_app
from ._engine import Engine
from ._vision import VisionEngine

__all__ = ["create_app", "serve"]

SERVE_EXTRA = "pip install 'onnx-export[openai-serve]'"


def _task(folder: str | os.PathLike[str]) -> str | None:
    """The task the folder's manifest names (``None``: loading it will say what is wrong)."""
    try:
        manifest = json.loads((pathlib.Path(folder) / "onnx_export.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return manifest.get("task") if isinstance(manifest, dict) else None


def _options(threads: int | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: the fused decoder's num_logits_to_keep
    # ONNX Runtime's pool threads spin between runs by default: here they would take the
    # cores the event loop (HTTP, tokenizing, streaming) needs between two steps.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads is not None:
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return options


def _load(
    folder: str | os.PathLike[str], threads: int | None, providers: list[str] | None
) -> OrtModelForCausalLM:
    model = OrtModelForCausalLM.from_pretrained(folder, providers, _options(threads))
    model.tokenizer  # noqa: B018 - text in and out needs tokenizer.json: fail at start
    return model


def _load_vision(
    folder: str | os.PathLike[str], threads: int | None, providers: list[str] | None
) -> ImageTextToTextPipeline:
    """An image-text-to-text folder with its tokenizer and image processor."""
    from onnx_export.hf.runtime._image_processor import ImageProcessor
    from onnx_export.hf.runtime._tokenizer import TextTokenizer
    from onnx_export.hf.runtime._vlm_pipeline import _processor_config
    from onnx_export.hf.runtime.generation._vlm import OrtModelForImageTextToText

    path = pathlib.Path(folder)
    model = OrtModelForImageTextToText.from_pretrained(path, providers, _options(threads))
    model.tokenizer  # noqa: B018 - text in and out needs tokenizer.json: fail at start
    return ImageTextToTextPipeline(
        model,
        TextTokenizer.from_folder(path),
        ImageProcessor.from_folder(path),
        _processor_config(path),
    )


def create_app(
    folder: str | os.PathLike[str],
    *,
    name: str | None = None,
    max_batch: int = 32,
    max_waiting: int = 64,
    threads: int | None = None,
    providers: list[str] | None = None,
) -> Any:
    """An ASGI application serving an exported text-generation folder, OpenAI's way.

    Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
    (``stream``, ``max_tokens``, ``stop``, ``temperature``, ``top_p``, ``seed``, ``n``,
    ``response_format`` with a JSON schema, ``tools`` given to the chat template and
    calls read back as ``tool_calls``, ``tool_choice``) and
    ``GET /health``. Every request is decoded in one continuous-batching loop.

    A folder exported for ``image-text-to-text`` also takes images in chat messages
    (``image_url`` content parts as data URLs); its requests are decoded one choice at a
    time, not batched.

    Args:
        folder: A folder ``onnx-export hf`` wrote for ``text-generation`` (the default
            target or the fused ``--target onnxruntime`` one, int4 too) or for
            ``image-text-to-text``, with the checkpoint's ``tokenizer.json``.
        name: The model's name in requests and ``/v1/models`` (the folder's name).
        max_batch: Rows (choices) decoded together at most.
        max_waiting: Rows that wait for a slot at most; a request past that gets 429.
        threads: ONNX Runtime's intra-op threads (its default: every core).
        providers: ONNX Runtime providers (``["cpu"]``, ``["cuda"]``); the CPU by default.

    Returns:
        A Starlette application (run it with uvicorn, or :func:`serve`).

    Raises:
        CheckpointError: The folder is not an exported text-generation folder.
        GenerationError: It has no ``tokenizer.json``, or the ``text`` extra is missing.

    Example:
        >>> from onnx_export.serving.openai import create_app
        >>> app = create_app("out", max_batch=16)  # doctest: +SKIP
        >>> import uvicorn; uvicorn.run(app, port=8000)  # doctest: +SKIP
    """
    if max_batch < 1 or max_waiting < 0:
        raise ValueError(
            f"max_batch must be >= 1 and max_waiting >= 0, got {max_batch} and {max_waiting}."
        )
    engine: Engine | VisionEngine
    if _task(folder) == "image-text-to-text":
        engine = VisionEngine(_load_vision(folder, threads, providers), max_waiting=max_waiting)
    else:
        engine = Engine(
            _load(folder, threads, providers), max_batch=max_batch, max_waiting=max_waiting
        )
    return build_app(engine, name or engine.model.folder.path.name)


def serve(
    folder: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    max_batch: int = 32,
    max_waiting: int = 64,
    threads: int | None = None,
    providers: list[str] | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve ``folder`` (see :func:`create_app`) on ``host:port`` until SIGINT or SIGTERM.

    Port 0 takes a free port; ``announce`` gets one line with the address. On a signal
    the server stops listening, finishes the requests it has (streams included), then
    returns.

    Example:
        >>> from onnx_export.serving.openai import serve
        >>> serve("out", host="0.0.0.0", port=8000)  # doctest: +SKIP
        serving out at http://0.0.0.0:8000/v1 (Ctrl-C stops)
    """
    try:
        import uvicorn
    except ImportError as e:
        raise GenerationError(f"The OpenAI-compatible server needs uvicorn: {SERVE_EXTRA}.") from e
    app = create_app(
        folder,
        name=name,
        max_batch=max_batch,
        max_waiting=max_waiting,
        threads=threads,
        providers=providers,
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"Cannot listen on {host}:{port}: {e.strerror}. Pick another --port.") from e
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=60, access_log=False
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    announce(f"serving {app.state.model_name} at http://{shown}:{bound}/v1 (Ctrl-C stops)")
    # uvicorn catches SIGINT/SIGTERM while it runs, drains, then raises the signal again
    # once its own handlers are gone: these take it, so a drained server returns normally.
    previous = {s: signal.signal(s, _ignore) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for number, handler in previous.items():
            signal.signal(number, handler)


def _ignore(number: int, frame: FrameType | None) -> None:
    """A signal that arrives after the server drained: nothing left to stop."""
