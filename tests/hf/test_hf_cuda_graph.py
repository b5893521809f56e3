"""``from_pretrained(..., cuda_graph=True)``: decode steps at fixed addresses and shapes.

On CUDA the steps are recorded once as a CUDA graph and replayed (``bench/gpu_check.py``
measures it). What a replay needs is checked here on the CPU provider: every step's inputs
and outputs bound once (the cache shared by pasts and presents, ``input_ids``,
``position_ids``, a mask as wide as the cache, ``logits``) give the tokens of the usual
loop and of transformers. On the CPU the option itself is refused with a typed error.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest
import torch

from onnx_export import hf
from onnx_export.hf.runtime.generation._static_cache import MAX_GRAPHS, StaticCache, StaticCaches
from tests.hf.checkpoints import CASES

tf = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def fused(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pathlib.Path]:
    """A tiny Llama exported with ``target="onnxruntime"`` (GQA, one fixed cache buffer)."""
    root = tmp_path_factory.mktemp("fused")
    model = CASES["llama"].save(root / "ckpt")
    hf.export_pretrained(root / "ckpt", root / "out", target="onnxruntime")
    return model, root / "out"


def test_cuda_graph_on_the_cpu_is_refused(fused: tuple[Any, pathlib.Path]) -> None:
    with pytest.raises(hf.CudaGraphError, match="CUDA graphs need the CUDA provider"):
        hf.OrtModelForCausalLM.from_pretrained(fused[1], cuda_graph=True)


def test_cuda_graph_without_a_fixed_cache_is_refused(tmp_path: pathlib.Path) -> None:
    """A decoder without GQA's shared buffer: named as the other reason (checked on CUDA)."""
    from onnx_export.hf.runtime._session import StepSession

    CASES["llama"].save(tmp_path / "ckpt")
    hf.export_pretrained(tmp_path / "ckpt", tmp_path / "out")
    session = StepSession(tmp_path / "out" / "model.onnx")
    assert not session.fixed_cache
    session.device = "cuda"  # what the check sees on a GPU; nothing runs
    with pytest.raises(hf.CudaGraphError, match="--target onnxruntime"):
        session._check_cuda_graph(tmp_path / "out" / "model.onnx")


def _fixed_addresses(folder: pathlib.Path) -> hf.OrtModelForCausalLM:
    """The model decoding as under ``cuda_graph=True``, without recording (the CPU's)."""
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    assert model.session.fixed_cache
    model.session.cuda_graph = True
    return model


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"do_sample": True, "top_k": 20, "seed": 3}],
    ids=["greedy", "sampling"],
)
def test_fixed_address_steps_give_the_usual_tokens(
    fused: tuple[Any, pathlib.Path], kwargs: dict[str, Any]
) -> None:
    reference, folder = fused
    ids = torch.randint(2, 90, (2, 7), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # row 1 is left-padded
    usual = hf.OrtModelForCausalLM.from_pretrained(folder)
    fixed = _fixed_addresses(folder)
    want = usual.generate(ids.numpy(), mask.numpy(), max_new_tokens=10, pad_token_id=0, **kwargs)
    got = fixed.generate(ids.numpy(), mask.numpy(), max_new_tokens=10, pad_token_id=0, **kwargs)
    np.testing.assert_array_equal(got, want)
    if not kwargs:
        with torch.no_grad():
            theirs = reference.generate(
                ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0
            )
        np.testing.assert_array_equal(got, theirs.numpy())


def test_steps_write_into_the_buffers_bound_before_the_first(
    fused: tuple[Any, pathlib.Path],
) -> None:
    """The mask is as wide as the cache from the start; a step only writes one more 1."""
    session = hf.OrtModelForCausalLM.from_pretrained(fused[1]).session
    cache = StaticCache(session, batch=1, capacity=9, graph_id=None)
    assert cache.empty_past(1) == {}
    prompt = np.array([[1, 1, 1, 1]], np.int64)
    feed = {"input_ids": np.array([[1, 5, 9, 22]]), "attention_mask": prompt}
    if "position_ids" in session.input_names:
        feed["position_ids"] = np.arange(4)[None, :]
    logits = cache.last_logits(cache.run(feed))
    next_feed = cache.stepper(prompt, np.array([[3]]))
    mask = cache._steps[1].array
    addresses = [b.value.data_ptr() for b in cache._steps]
    assert mask.shape == (1, 9) and mask.sum() == 4
    for step in range(5):
        assert next_feed(logits.argmax(-1)) == {}
        logits = cache.last_logits(cache.run({}))
        assert mask.sum() == 5 + step
        assert [b.value.data_ptr() for b in cache._steps] == addresses
    with pytest.raises(hf.GenerationError, match="holds 9 positions"):
        next_feed(logits.argmax(-1))


def test_a_shape_keeps_its_buffers_across_decodings(fused: tuple[Any, pathlib.Path]) -> None:
    """A recorded graph replays the addresses it recorded: the same shape, the same buffers."""
    model = _fixed_addresses(fused[1])
    first = model.generate([[1, 5, 9, 22]], max_new_tokens=6)
    assert model._static is not None
    (cache,) = model._static._caches.values()
    addresses = [b.value.data_ptr() for b in cache._steps]
    again = model.generate([[1, 5, 9, 22]], max_new_tokens=6)
    np.testing.assert_array_equal(again, first)
    longer = model.generate([[1, 5, 9, 22, 40, 7]], max_new_tokens=4)  # 10 positions again
    assert list(model._static._caches.values()) == [cache]
    assert [b.value.data_ptr() for b in cache._steps] == addresses
    usual = hf.OrtModelForCausalLM.from_pretrained(fused[1])
    np.testing.assert_array_equal(longer, usual.generate([[1, 5, 9, 22, 40, 7]], max_new_tokens=4))


def test_graph_ids_one_per_shape_up_to_the_limit(fused: tuple[Any, pathlib.Path]) -> None:
    session = hf.OrtModelForCausalLM.from_pretrained(fused[1]).session
    caches = StaticCaches(session, record=True)
    ids = [caches.get(1, 8 + i).graph_id for i in range(MAX_GRAPHS + 2)]
    assert ids == [*range(MAX_GRAPHS), None, None]
    assert caches.get(1, 8).graph_id == 0  # the same shape: the same buffers and graph
    assert StaticCaches(session, record=False).get(1, 8).graph_id is None
