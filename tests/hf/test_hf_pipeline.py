"""``hf.pipeline``: raw texts in (tokenized with the folder's tokenizer.json), labels and
scores out, equal to eager transformers on the same token ids."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from onnx_export import hf
from tests.hf.task_cases import TASK_CASES, VOCAB

tokenizers = pytest.importorskip("tokenizers")


def _tokenizer(folder: pathlib.Path) -> None:
    words = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, VOCAB)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))


def test_text_classification_pipeline(tmp_path: pathlib.Path) -> None:
    case = TASK_CASES["albert/text-classification"]
    model = case.save(tmp_path / "checkpoint")
    _tokenizer(tmp_path / "checkpoint")
    hf.export_pretrained(tmp_path / "checkpoint", tmp_path / "onnx")
    classify = hf.pipeline("text-classification", tmp_path / "onnx")
    texts = ["w5 w7 w9 w11", "w3 w4"]
    got = classify(texts)
    ids = torch.tensor([[5, 7, 9, 11], [3, 4, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        probs = model(input_ids=ids, attention_mask=mask).logits.softmax(-1).numpy()
    assert [g["label"] for g in got] == [model.config.id2label[int(i)] for i in probs.argmax(-1)]
    np.testing.assert_allclose([g["score"] for g in got], probs.max(-1), rtol=1e-4, atol=1e-5)
    assert "text-classification" in repr(classify)
    with pytest.raises(hf.CheckpointError, match="pipeline\\(\\) runs"):
        hf.pipeline("object-detection", tmp_path / "onnx")
