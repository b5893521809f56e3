"""Start ``onnx-export serve FOLDER --openai --port 0`` as a real process, torch blocked.

The server runs in a subprocess whose ``torch`` and ``transformers`` imports fail (the
runtime a deployment installs has neither); the address comes from its first line. Also
what the OpenAI tests share: the official client on a server, its ``/health``, the
prompts, and the batcher check both text folders (default and fused) pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: Prompts the tiny Llama's tokenizer (``openai_folder.py``) was trained near.
PROMPTS = [
    "hello there",
    "Once upon a time",
    '{"name": "ada"',
    "user: how are you?",
    "a little model",
    "[1, 22",
    "there was",
    "tools: weather",
]
_LAUNCH = (
    "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; "
    "from onnx_export.cli import main; sys.exit(main(sys.argv[1:]))"
)


@dataclasses.dataclass
class Server:
    """A running server: its process and base URL (``http://127.0.0.1:PORT/v1``)."""

    process: subprocess.Popen[str]
    url: str

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT`` (for ``/health``)."""
        return self.url.removesuffix("/v1")

    def stop(self, timeout: float = 60) -> tuple[int, str]:
        """SIGTERM, then the exit code and the rest of stdout."""
        if self.process.poll() is None:
            self.process.terminate()
        out, _ = self.process.communicate(timeout=timeout)
        return self.process.returncode, out


def start(folder: pathlib.Path, *options: str, timeout: float = 120) -> Server:
    """Start the server on ``folder`` and wait until ``/health`` answers."""
    command = [sys.executable, "-c", _LAUNCH, "serve", str(folder), "--openai", "--port", "0"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*command, "--threads", "1", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        cwd=ROOT,
    )
    assert process.stdout is not None
    line, seen = "", ""
    for line in iter(process.stdout.readline, ""):  # ONNX Runtime may warn first
        seen += line
        if re.search(r"http://[^ ]+/v1", line) or len(seen) > 20000:
            break
    found = re.search(r"http://[^ ]+/v1", line)
    if found is None:
        rest = seen + (process.communicate(timeout=30)[0] if process.poll() is None else "")
        raise AssertionError(f"the server did not start: {rest[-3000:]}")
    server = Server(process, found.group(0))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(server.root + "/health", timeout=5) as answer,
        ):
            if answer.status == 200:
                return server
        time.sleep(0.2)
    server.stop()
    raise AssertionError("the server's /health did not answer")


@contextlib.contextmanager
def running(folder: pathlib.Path, *options: str) -> Iterator[Server]:
    """A server for the ``with`` block, stopped (SIGTERM) after it."""
    server = start(folder, *options)
    try:
        yield server
    finally:
        try:
            server.stop()
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.communicate()


def client(server: Server, timeout: float = 120) -> Any:
    """The official ``openai`` client on ``server`` (no retries)."""
    import openai

    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=timeout)


def health(server: Server) -> dict[str, Any]:
    """``GET /health``: the status, rows active and waiting, and the counters."""
    with urllib.request.urlopen(server.root + "/health", timeout=10) as answer:
        return dict(json.loads(answer.read()))


def assert_prefilled_together_alone(model: Any) -> None:
    """The server's batcher: prompts of several lengths join in one padded prefill, two
    rows end after their first token, and each row gets the tokens it gets alone."""
    prompts = [model.tokenizer.encode([p])[0] for p in PROMPTS]
    news = [6, 1, 9, 3, 1, 7, 5, 2]
    batcher = model.batcher()
    ids = [batcher.submit(p, max_new_tokens=n) for p, n in zip(prompts, news, strict=True)]
    done = {r.id: r.tokens for r in batcher.run()}
    for rid, prompt, new in zip(ids, prompts, news, strict=True):
        alone = model.generate([prompt], max_new_tokens=new)[0, len(prompt) :]
        assert done[rid] == alone.tolist(), rid
