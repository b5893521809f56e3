"""Run an exported folder with ``onnx_export.hf``'s runtime where torch cannot be imported.

Usage: ``python torch_free_worker.py JOB.json``. The job names the folder, an ``.npz`` of
input arrays, the calls to make and where to write their results (another ``.npz``).
``import torch`` and ``import transformers`` fail here, as on a machine without them.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

sys.modules["torch"] = None  # type: ignore[assignment]  # any `import torch` now fails
sys.modules["transformers"] = None  # type: ignore[assignment]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # this checkout

# task -> the runtime class of the single-graph tasks.
_CLASSES = {
    "feature-extraction": "OrtModelForFeatureExtraction",
    "sentence-similarity": "OrtModelForSentenceSimilarity",
    "fill-mask": "OrtModelForMaskedLM",
    "text-classification": "OrtModelForSequenceClassification",
    "token-classification": "OrtModelForTokenClassification",
    "question-answering": "OrtModelForQuestionAnswering",
    "multiple-choice": "OrtModelForMultipleChoice",
    "image-classification": "OrtModelForImageClassification",
    "semantic-segmentation": "OrtModelForSemanticSegmentation",
    "object-detection": "OrtModelForObjectDetection",
    "depth-estimation": "OrtModelForDepthEstimation",
    "audio-classification": "OrtModelForAudioClassification",
    "automatic-speech-recognition": "OrtModelForCTC",
    "zero-shot-image-classification": "OrtModelForZeroShotImageClassification",
}


def main(job_path: str) -> None:
    """Make the job's calls and save their results."""
    import numpy as np

    from onnx_export import hf

    job = json.loads(open(job_path, encoding="utf-8").read())  # noqa: SIM115
    arrays = np.load(job["inputs"])
    task = json.loads(open(f"{job['folder']}/onnx_export.json").read())["task"]  # noqa: SIM115
    files = json.loads(open(f"{job['folder']}/onnx_export.json").read())["onnx_files"]  # noqa: SIM115
    model: Any
    if task == "image-text-to-text":
        model = hf.OrtModelForImageTextToText.from_pretrained(job["folder"])
    elif task == "text-generation":
        model = hf.OrtModelForCausalLM.from_pretrained(job["folder"])
    elif "decoder_model.onnx" in files:
        model = hf.OrtModelForSeq2SeqLM.from_pretrained(job["folder"])
    else:
        model = getattr(hf, _CLASSES[task]).from_pretrained(job["folder"])
    results = {}
    for call in job["calls"]:
        kwargs = {k: arrays[v] for k, v in call.get("arrays", {}).items()}
        kwargs.update(call.get("kwargs", {}))
        if call["method"] == "pipeline":  # text out, as a 0-d string array
            images = [kwargs.pop(k) for k in sorted(kwargs) if k.startswith("image")]
            results[call["name"]] = np.array(hf.pipeline(task, job["folder"])(images, **kwargs))
        elif call["method"] == "run":  # the first output
            results[call["name"]] = next(iter(model(**kwargs).values()))
        elif call["method"] == "outputs":  # every output, as NAME.OUTPUT
            for key, value in model(**kwargs).items():
                results[f"{call['name']}.{key}"] = value
        else:
            results[call["name"]] = getattr(model, call["method"])(**kwargs)
    loaded = [m for m in ("torch", "transformers") if sys.modules.get(m) is not None]
    assert not loaded, f"imported {loaded}"
    np.savez(job["outputs"], **results)


if __name__ == "__main__":
    main(sys.argv[1])
