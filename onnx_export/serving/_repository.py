"""Writing a Triton model repository (and a KServe manifest) for a saved model."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil
import tempfile

from ._config_text import Backend, ServingOptions, config_text
from ._errors import RepositoryError
from ._kserve import manifest_text
from ._signature import CacheNotServable, ServedModel, read_served_model

__all__ = ["TritonRepository", "write_triton_repository", "PYTHON_MODEL_SOURCE"]

#: The Python backend's ``model.py`` (``backend="python"``): this package's module file.
PYTHON_MODEL_SOURCE = pathlib.Path(__file__).with_name("_python_model.py")
_HF_MANIFEST = "onnx_export.json"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_MARK = "onnx_export.json"  # in each model folder we write: what wrote it


@dataclasses.dataclass(frozen=True)
class TritonRepository:
    """A model repository that :func:`write_triton_repository` wrote.

    Attributes:
        path: The repository folder (``tritonserver --model-repository``).
        models: The model names written, each a folder ``path / name``.
        backend: ``"onnxruntime"`` or ``"python"``.
        kserve_manifest: The InferenceService manifest, when one was asked for.
        not_served: The ONNX files of an ``onnx-export hf`` folder left out, each with why
            (a LLaVA folder's decoder with its key/value cache; its vision encoder is served).

    Example:
        >>> import pathlib
        >>> from onnx_export.serving import TritonRepository
        >>> TritonRepository(pathlib.Path("repo"), ("bert",), "onnxruntime").config_path("bert")
        PosixPath('repo/bert/config.pbtxt')
    """

    path: pathlib.Path
    models: tuple[str, ...]
    backend: str
    kserve_manifest: pathlib.Path | None = None
    not_served: tuple[tuple[str, str], ...] = ()

    def config_path(self, name: str) -> pathlib.Path:
        """The ``config.pbtxt`` of model ``name``.

        Example:
            >>> import pathlib
            >>> from onnx_export.serving import TritonRepository
            >>> TritonRepository(pathlib.Path("r"), ("m",), "python").config_path("m").name
            'config.pbtxt'
        """
        return self.path / name / "config.pbtxt"


def write_triton_repository(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    name: str | None = None,
    options: ServingOptions | None = None,
    backend: Backend = "onnxruntime",
    kserve: str | None = None,
) -> TritonRepository:
    """Write a Triton model repository for a saved model or an exported HF folder.

    Each model becomes ``output/NAME/config.pbtxt`` and ``output/NAME/1/model.onnx`` (with
    its external data beside it). The configuration comes from the graph and the adapter
    spec: names, ``TYPE_*`` dtypes, dims with -1 for dynamic axes; ``max_batch_size`` and
    ``dynamic_batching`` when the first axis of every input and output is one dynamic batch
    axis (its dims then leave it out), else ``max_batch_size: 0`` with full dims;
    ``instance_group`` from ``options``; ``model_warmup`` with zeros; the adapter spec as
    the parameter ``onnx_export.adapter_spec``, which :class:`TritonModel` reads back.
    ``output`` may hold other models; a model folder of the same name is replaced only if
    this function wrote it, and each model folder appears whole or not at all.

    Args:
        source: A ``.onnx`` file saved by ``ONNXProgram.save`` (or any ONNX model), or a
            folder written by ``onnx-export hf`` (one model per ONNX file in it).
        output: The repository folder (created if missing).
        name: The model name (default: the file's stem, or the HF folder's name); a folder
            with several ONNX files gets ``NAME_STEM`` for each.
        options: Device, instances, batch size, queue delay, warmup.
        backend: ``"onnxruntime"`` (Triton's ONNX Runtime backend) or ``"python"`` (Triton's
            Python backend running :func:`onnx_export.load` with ONNX Runtime inside, what
            :class:`TritonServer` serves with PyTriton's bundled server).
        kserve: A storage URI (``s3://bucket/models``, ``pvc://claim/path``) where the
            repository will be uploaded: also write ``output/NAME.inferenceservice.yaml``, a
            KServe InferenceService for its ``onnx`` model format on Triton.

    Returns:
        What was written.

    Raises:
        RepositoryError: A source that is no model, a decoder with a key/value cache, a bad
            name, or an output folder that holds something else under that name.

    Example:
        >>> from onnx_export.serving import write_triton_repository
        >>> repo = write_triton_repository("model.onnx", "repo")  # doctest: +SKIP
        >>> print(repo.config_path("model").read_text())  # doctest: +SKIP
    """
    options = options or ServingOptions()
    _check_options(options, backend)
    models, not_served = _served_models(pathlib.Path(source), name)
    root = pathlib.Path(output)
    if root.exists() and not root.is_dir():
        raise RepositoryError(f"expected a folder for the repository, got the file {root}.")
    root.mkdir(parents=True, exist_ok=True)
    for model_name, model in models:
        _write_model(root, model_name, model, backend, options)
    manifest = None
    if kserve is not None:
        first = models[0][0] if len(models) == 1 else (name or models[0][0])
        manifest = root / f"{first}.inferenceservice.yaml"
        _write_atomically(manifest, manifest_text(first, kserve, options))
    return TritonRepository(root, tuple(n for n, _ in models), backend, manifest, not_served)


def _check_options(options: ServingOptions, backend: str) -> None:
    if backend not in ("onnxruntime", "python"):
        raise RepositoryError(f"expected backend 'onnxruntime' or 'python', got {backend!r}.")
    if options.device not in ("cpu", "cuda"):
        raise RepositoryError(f"expected device 'cpu' or 'cuda', got {options.device!r}.")
    for field in ("instances", "max_batch_size"):
        if getattr(options, field) < 1:
            raise RepositoryError(f"expected {field} >= 1, got {getattr(options, field)}.")
    if options.max_queue_delay_us < 0:
        raise RepositoryError(
            f"expected max_queue_delay_us >= 0, got {options.max_queue_delay_us}."
        )


def _served_models(
    source: pathlib.Path, name: str | None
) -> tuple[list[tuple[str, ServedModel]], tuple[tuple[str, str], ...]]:
    """The models to serve, and the files of an hf folder left out (with why).

    An hf folder's files that Triton cannot serve (a decoder with its cache) are left out
    when another file is servable (a VLM's vision encoder); with none, the first refusal
    is the error.
    """
    if name is not None and not _NAME.match(name):
        raise RepositoryError(
            f"expected a model name of letters, digits, '_', '.', '-' (a folder name Triton "
            f"accepts), got {name!r}."
        )
    if not source.is_dir():
        return [(name or _clean(source.stem), read_served_model(source))], ()
    files = _hf_files(source)
    base = name or _clean(source.name)
    served: list[tuple[str, ServedModel]] = []
    refused: list[tuple[str, CacheNotServable]] = []
    for file in files:
        try:
            model = read_served_model(source / file)
        except CacheNotServable as e:
            refused.append((file, e))
            continue
        stem = _clean(pathlib.Path(file).stem)
        served.append((base if len(files) == 1 else f"{base}_{stem}", model))
    if not served:
        raise refused[0][1]
    reasons = tuple(
        (
            file,
            "a decoder step with a key/value cache, which Triton cannot hold; generate with "
            "`onnx-export serve` or the folder's onnx_export.hf model class",
        )
        for file, _ in refused
    )
    return served, reasons


def _hf_files(folder: pathlib.Path) -> list[str]:
    manifest = folder / _HF_MANIFEST
    if not manifest.is_file():
        raise RepositoryError(
            f"expected a .onnx file or a folder written by `onnx-export hf` (with "
            f"{_HF_MANIFEST}), got the folder {folder} without it."
        )
    try:
        files = json.loads(manifest.read_text())["onnx_files"]
    except (ValueError, KeyError, TypeError) as e:
        raise RepositoryError(f"{manifest} is not a manifest onnx-export hf wrote: {e}") from e
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        raise RepositoryError(f"{manifest} lists no ONNX files (onnx_files: {files!r}).")
    return files


def _clean(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".") or "model"
    return cleaned


def _write_model(
    root: pathlib.Path,
    name: str,
    model: ServedModel,
    backend: Backend,
    options: ServingOptions,
) -> None:
    target = root / name
    if target.exists() and not (target / _MARK).is_file():
        raise RepositoryError(
            f"{target} exists and was not written by onnx-export; expected a new model name. "
            "Choose another name (--name) or remove that folder."
        )
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    staging.chmod(0o755)  # mkdtemp's 0o700 would hide the model from a server of another user
    try:
        version = staging / "1"
        version.mkdir()
        _copy_model(model, version)
        if backend == "python":
            shutil.copyfile(PYTHON_MODEL_SOURCE, version / "model.py")
        (staging / "config.pbtxt").write_text(config_text(model, name, backend, options))
        (staging / _MARK).write_text(
            json.dumps({"source": str(model.path), "backend": backend}, indent=2) + "\n"
        )
        _swap_in(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy_model(model: ServedModel, version: pathlib.Path) -> None:
    shutil.copyfile(model.path, version / "model.onnx")
    for location in model.external_files:
        relative = pathlib.PurePosixPath(location)
        if relative.is_absolute() or ".." in relative.parts:
            raise RepositoryError(
                f"{model.path} keeps weights at {location!r}, outside its folder; expected a "
                "file beside the model. Save the model again with ONNXProgram.save."
            )
        data = model.path.parent / relative
        if not data.is_file():
            raise RepositoryError(
                f"{model.path} keeps weights in {data}, which does not exist; copy it beside "
                "the model."
            )
        (version / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data, version / relative)


def _swap_in(staging: pathlib.Path, target: pathlib.Path) -> None:
    """Replace ``target`` by ``staging`` so that readers see the old or the new folder."""
    if not target.exists():
        staging.rename(target)
        return
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _write_atomically(path: pathlib.Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's 0o600, as any other file written
        os.replace(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise
