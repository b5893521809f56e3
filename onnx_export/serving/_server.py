"""Starting and stopping a real Triton server: PyTriton's bundled ``tritonserver``.

The ``nvidia-pytriton`` wheel carries ``tritonserver`` with its Python backend and one
backend stub per Python version. The stub embeds the Python it finds as
``libpython3.X.so.1.0`` through the dynamic linker, then runs this venv's standard library
and packages: with the system's libpython (Debian's 3.11.2) and a pyenv 3.11.7 venv, the two
disagree (``'_thread.RLock' object has no attribute '_recursion_count'``). So the server
gets ``LD_LIBRARY_PATH`` with this interpreter's own ``libpython`` first; an interpreter
built without one (``--enable-shared``) is refused with the fix.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from types import TracebackType

from ._errors import ServerError

__all__ = ["TritonServer", "find_tritonserver", "free_port"]

#: glog's prefix of a server log line (``E1203 14:14:31.146138 2838 main.cc:257] ``).
_GLOG = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ")
_GLOG_ERROR = re.compile(r"^[EF]\d{4} ")
#: Errors a server without a GPU logs on every start.
_HARMLESS = ("CudaDriverHelper", "NVML", "DCGM")
_LIBS = "nvidia_pytriton.libs"  # the wheel's libraries, beside pytriton/
_STUB = "triton_python_backend_stub"
_INSTALL = "pip install --no-deps nvidia-pytriton (its binary is all onnx-export uses)"


def find_tritonserver() -> pathlib.Path:
    """The ``tritonserver`` folder of the installed ``nvidia-pytriton`` (not imported).

    Raises:
        ServerError: The package is not installed.

    Example:
        >>> from onnx_export.serving import find_tritonserver
        >>> find_tritonserver() / "bin" / "tritonserver"  # doctest: +SKIP
    """
    spec = importlib.util.find_spec("pytriton")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        folder = pathlib.Path(location) / "tritonserver"
        if (folder / "bin" / "tritonserver").is_file():
            return folder
    raise ServerError(
        "expected the Triton server of the nvidia-pytriton package, found "
        + (f"pytriton in {locations} without tritonserver/bin" if locations else "no pytriton")
        + f". Install it: {_INSTALL}; or pass tritonserver= the folder of a Triton install "
        "(with bin/ and backends/)."
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now.

    Example:
        >>> from onnx_export.serving import free_port
        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class TritonServer:
    """A ``tritonserver`` process serving a model repository, started and stopped by us.

    The server listens on ``host`` only (loopback by default) with HTTP and gRPC; metrics
    are off. Its Python backend runs this interpreter's packages (``onnx_export`` included)
    with this interpreter's own ``libpython``. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`; :meth:`stop` ends the server and its backend stubs
    (one process group) and waits for them. A process that exits without calling
    :meth:`stop` stops its servers on the way out (``atexit``); one that is killed
    (``SIGKILL``) cannot, and leaves its server running.

    Args:
        repository: The model repository (see :func:`write_triton_repository`).
        http_port: The HTTP port (``None``: a free one).
        grpc_port: The gRPC port (``None``: a free one).
        host: The address to listen on.
        tritonserver: A folder with ``bin/tritonserver`` and ``backends/`` (default: the
            one ``nvidia-pytriton`` installs).
        log_path: Where the server's log goes (default: a file beside the backends, which
            :meth:`stop` removes).

    Example:
        >>> from onnx_export.serving import TritonServer, TritonModel
        >>> with TritonServer("repo") as server:  # doctest: +SKIP
        ...     outputs = TritonModel(server.http_url, "model")(x, {"mask": m})
    """

    def __init__(
        self,
        repository: str | os.PathLike[str],
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        host: str = "127.0.0.1",
        tritonserver: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.repository = pathlib.Path(repository)
        self.host = host
        self.http_port = http_port or free_port(host)
        self.grpc_port = grpc_port or free_port(host)
        while self.grpc_port == self.http_port:  # two free ports: not the same one twice
            self.grpc_port = free_port(host)
        self._home = pathlib.Path(tritonserver) if tritonserver else None
        self._log_path = pathlib.Path(log_path) if log_path else None
        self._work: pathlib.Path | None = None
        self._log: pathlib.Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint (what ``TritonModel`` takes)."""
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``grpc://host:port`` of the gRPC endpoint."""
        return f"grpc://{self.host}:{self.grpc_port}"

    @property
    def log_path(self) -> pathlib.Path | None:
        """The server's log file once started (removed by :meth:`stop` unless given)."""
        return self._log

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process else None

    def start(self, timeout: float = 120.0) -> TritonServer:
        """Start the server and wait until every model is ready.

        Raises:
            ServerError: No server binary, an interpreter the Python backend cannot use, a
                port in use, or a server that exits or is not ready within ``timeout``
                seconds (the message quotes the end of its log).
        """
        if self._process is not None:
            raise ServerError(f"this server already runs (pid {self._process.pid}).")
        if not self.repository.is_dir():
            raise ServerError(f"expected a model repository folder, got {self.repository}.")
        home = self._home or find_tritonserver()
        environment = server_environment(home)
        self._work = pathlib.Path(tempfile.mkdtemp(prefix="onnx-export-triton-"))
        backends = _backend_folder(home, self._work)
        log = self._log_path or self._work / "tritonserver.log"
        command = [
            str(home / "bin" / "tritonserver"),
            f"--model-repository={self.repository.resolve()}",
            f"--backend-directory={backends}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            "--allow-metrics=false",
            "--exit-timeout-secs=5",
            f"--log-file={log}",
        ]
        self._log = log
        self._process = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # one process group with the backend stubs, for stop()
        )
        atexit.register(self.stop)  # a process that exits without stop() ends its server
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        url = f"http://{self.http_url}/v2/health/ready"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._process is not None  # set by start()
            if self._process.poll() is not None:
                raise ServerError(
                    f"tritonserver exited with code {self._process.returncode} before it was "
                    f"ready. Its log ends with: {self.log_tail()}"
                )
            if _ready(url):
                return
            time.sleep(0.2)
        raise ServerError(
            f"tritonserver was not ready within {timeout:.0f} s. Its log ends with: "
            f"{self.log_tail()}"
        )

    def log_tail(self, lines: int = 6) -> str:
        """The server log's errors (else its last ``lines`` lines), as one line.

        Example:
            >>> from onnx_export.serving import TritonServer
            >>> TritonServer("repo", http_port=8000, grpc_port=8001).log_tail()
            '(no log)'
        """
        if self._log is None:
            return "(no log)"
        try:
            text = self._log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        kept = [" ".join(line.split()) for line in text.splitlines()]
        kept = [line for line in kept if line and not line.startswith(("|", "+"))]
        errors = [
            _GLOG.sub("", line)
            for line in kept
            if _GLOG_ERROR.match(line) and not any(h in line for h in _HARMLESS)
        ]
        shown = errors[-lines:] or [_GLOG.sub("", line) for line in kept[-lines:]]
        return " | ".join(shown) or "(empty log)"

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server and its backend stubs; wait for them (then kill what is left)."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            _stop_group(process, timeout)
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def __enter__(self) -> TritonServer:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):  # not listening yet, or not ready
        return False


def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    group = process.pid  # start_new_session: the group id is the server's pid
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        process.wait(5)
    deadline = time.monotonic() + 5
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(group):  # a stub the server did not end
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def server_environment(home: pathlib.Path) -> dict[str, str]:
    """The server's environment: this interpreter's libpython, bin folder and packages.

    Raises:
        ServerError: This Python has no stub in ``home`` or no shared ``libpython``.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stubs_folder = home / "python_backend_stubs"
    if stubs_folder.is_dir() and not (stubs_folder / version / _STUB).is_file():
        stubs = sorted(p.name for p in (home / "python_backend_stubs").glob("*"))
        raise ServerError(
            f"Triton's Python backend in {home} has stubs for Python {', '.join(stubs) or '(none)'}"
            f", not for this Python {version} ({sys.executable}). Run onnx-export from a venv "
            "of one of those versions."
        )
    environment = dict(os.environ)
    libraries = []
    if stubs_folder.is_dir():  # PyTriton's layout: its stub, its libraries
        libraries = [str(_shared_libpython().parent), str(home.parent.parent / _LIBS)]
    if environment.get("LD_LIBRARY_PATH"):
        libraries.append(environment["LD_LIBRARY_PATH"])
    if libraries:
        environment["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
    # The stub finds this venv (its pyvenv.cfg, so its site-packages) through PATH.
    environment["PATH"] = os.pathsep.join(
        [str(pathlib.Path(sys.executable).parent), environment.get("PATH", "")]
    )
    # The model.py puts these first on the stub's sys.path: this onnx_export, not another.
    package_root = str(pathlib.Path(__file__).resolve().parents[2])
    paths = [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_root not in paths and not _in_site_packages(package_root):
        paths.insert(0, package_root)
    if paths:
        environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment


def _in_site_packages(folder: str) -> bool:
    return folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}


def _shared_libpython() -> pathlib.Path:
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    folder = sysconfig.get_config_var("LIBDIR") or ""
    path = pathlib.Path(folder) / soname if soname.startswith("libpython") else None
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or path is None or not path.exists():
        raise ServerError(
            f"Triton's Python backend needs this Python's own shared libpython, and "
            f"{sys.executable} (Python {sys.version.split()[0]}) was built without one "
            f"(Py_ENABLE_SHARED={sysconfig.get_config_var('Py_ENABLE_SHARED')}, "
            f"INSTSONAME={soname!r} in {folder!r}); the stub would run another Python's "
            "libpython against this standard library. Make the venv from an interpreter "
            "built with --enable-shared: pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared, or "
            "the system's python3 (Debian: /usr/bin/python3.11 -m venv)."
        )
    return path


def _backend_folder(home: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """A ``backends/python`` with the stub for this Python, as PyTriton lays it out.

    A Triton install without PyTriton's ``python_backend_stubs`` keeps its own backends.
    """
    if not (home / "python_backend_stubs").is_dir():
        return home / "backends"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = work / "backends" / "python"
    python.mkdir(parents=True)
    for item in (home / "backends" / "python").iterdir():
        if item.is_file() and item.name != _STUB:
            shutil.copyfile(item, python / item.name)
    stub = python / _STUB
    shutil.copyfile(home / "python_backend_stubs" / version / stub.name, stub)
    stub.chmod(0o755)
    return work / "backends"
