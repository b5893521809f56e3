"""An OpenAI-compatible HTTP server over a folder ``onnx-export hf`` wrote.

``onnx-export serve FOLDER --openai --port 8000`` (or :func:`serve`) answers OpenAI's
``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent
events when asked; ``tools`` in, ``tool_calls`` out) and ``/health``. A text-generation
folder's requests are decoded in one continuous-batching loop over the model; an
image-text-to-text folder's chat takes images (``image_url`` data URLs), decoded one
choice at a time. Starlette and uvicorn (the ``openai-serve`` extra); no torch.

Usage:
    >>> from onnx_export.serving.openai import serve
    >>> serve("out", port=8000)  # doctest: +SKIP
    serving out at http://127.0.0.1:8000/v1 (Ctrl-C stops)
"""

from ._server import create_app, serve

__all__ = ["create_app", "serve"]
