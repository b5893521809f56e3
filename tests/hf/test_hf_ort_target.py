"""``target="onnxruntime"``: one GroupQueryAttention per layer, transformers' greedy tokens."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from onnx_export import hf
from tests.hf.checkpoints import CASES

pytest.importorskip("transformers")


@pytest.fixture
def slow(request: pytest.FixtureRequest) -> None:
    """Skips the test unless slow tests were asked for (a few exports each)."""
    asked = request.config.getoption("--runslow", default=False)
    if not asked and os.environ.get("ONNX_EXPORT_RUNSLOW") != "1":
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(2, 90, (2, 7), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # the second row left-padded
    return ids, mask


def _ops(folder: pathlib.Path) -> collections.Counter[str]:
    model = onnx.load(folder / "model.onnx", load_external_data=False)
    return collections.Counter(n.op_type for n in model.graph.node)


def _llama16() -> Any:
    """A tiny Llama with head size 16: the size from which ORT rotates inside GQA."""
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=None,
        initializer_range=0.2,  # varied greedy tokens (see tests/hf/checkpoints.py)
    )
    torch.manual_seed(0)
    return tf.LlamaForCausalLM(config).eval()


def _export_and_compare(name: str, tmp_path: pathlib.Path, new_tokens: int = 12) -> None:
    """Greedy tokens of the fused export equal transformers' on batch 1 and padded batch 2."""
    if name == "llama16":
        model = _llama16()
        model.save_pretrained(tmp_path / "ckpt")
    else:
        model = CASES[name].save(tmp_path / "ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the fused graph, not the fallback
        hf.export_pretrained(tmp_path / "ckpt", tmp_path / "out", target="onnxruntime")
    ops = _ops(tmp_path / "out")
    assert ops["GroupQueryAttention"] == model.config.num_hidden_layers, ops
    assert ops["Softmax"] == 0, ops  # no attention left outside GQA
    ort_model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "out")
    ids, mask = _prompts()
    for batch in (1, 2):
        with torch.no_grad():
            expected = model.generate(
                ids[:batch],
                attention_mask=mask[:batch],
                max_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        got = ort_model.generate(
            ids[:batch].numpy(), mask[:batch].numpy(), max_new_tokens=new_tokens, pad_token_id=0
        )
        np.testing.assert_array_equal(got, expected.numpy())


def test_llama_is_one_gqa_per_layer_with_transformers_tokens(tmp_path: pathlib.Path) -> None:
    _export_and_compare("llama16", tmp_path)
    ops = _ops(tmp_path / "out")
    layers = 2
    # Q/K/V packed: per layer one MatMul into GQA, o_proj, gate, up, down; plus lm_head.
    assert ops["MatMul"] == 5 * layers + 1, ops
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * layers, ops
    assert "RotaryEmbedding" not in ops and "Sin" not in ops, ops  # rotary inside GQA
    # GQA's rows (tokens first, the mask counting them): each row's count (one ReduceSum,
    # shared by every layer and by the head's GatherND of each row's last token) and the
    # mask's width (Shape); no attention bias, no Slice of the last position
    assert ops["ReduceSum"] == 1 and ops["GatherND"] == 1 and ops["Shape"] == 2, ops
    assert not {"ArgMax", "Where", "Expand", "Slice", "Squeeze"} & set(ops), ops
    graph = onnx.load(tmp_path / "out" / "model.onnx", load_external_data=False).graph
    for node in graph.node:
        if node.op_type == "SkipSimplifiedLayerNormalization":  # no unread statistics
            assert list(node.output)[1:3] == ["", ""], node.output
    _check_genai_config(tmp_path / "out")


def _check_genai_config(folder: pathlib.Path) -> None:
    """genai_config.json names the graph's inputs; onnxruntime-genai (if installed) runs it."""
    config = json.loads((folder / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    graph = onnx.load(folder / "model.onnx", load_external_data=False).graph
    names = {i.name for i in graph.input}
    assert {"input_ids", "attention_mask", "position_ids"} <= names
    assert {v for k, v in decoder["inputs"].items() if "names" not in k} <= names
    assert decoder["inputs"]["past_key_names"] % 0 in names
    assert decoder["num_hidden_layers"] == 2 and decoder["head_size"] == 16
    metadata = {p.key: p.value for p in onnx.load(folder / "model.onnx").metadata_props}
    shared = metadata.get("onnx_export.past_present_share_buffer") == "1"
    assert shared  # the fused decoder's pasts go to GQA only
    # GQA rotates at the physical positions: position_ids is an input nothing reads, which
    # the runtime binds once instead of each step (the tokens above are still eager's)
    assert metadata.get("onnx_export.unread_inputs") == "position_ids"
    assert metadata.get("onnx_export.padding_side") == "right"  # GQA's rows, tokens first
    assert hf.OrtModelForCausalLM.from_pretrained(folder).session.pads_right
    assert hf.OrtModelForCausalLM.from_pretrained(folder).session.unread_inputs == {"position_ids"}
    assert config["search"]["past_present_share_buffer"] is shared
    try:
        import onnxruntime_genai as og
    except ImportError:
        return  # the config is all that can be checked without onnxruntime-genai
    ids, _ = _prompts()
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=ids.shape[1] + 8, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids[:1].numpy())
    while not generator.is_done():
        generator.generate_next_token()
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    expected = ours.generate(ids[:1].numpy(), max_new_tokens=8, eos_token_id=[])
    np.testing.assert_array_equal(np.asarray(generator.get_sequence(0)), expected[0])


def test_genai_runs_a_right_padded_batch_on_the_fused_graph(tmp_path: pathlib.Path) -> None:
    """onnxruntime-genai's loop over our graph, a batch it pads: each row gets our tokens.

    genai pads on the right and counts each row's length from its mask, as the graph does.
    """
    og = pytest.importorskip("onnxruntime_genai")
    _llama16().save_pretrained(tmp_path / "ckpt")
    hf.export_pretrained(tmp_path / "ckpt", tmp_path / "out", target="onnxruntime")
    folder = tmp_path / "out"
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    pad = json.loads((folder / "genai_config.json").read_text())["model"]["pad_token_id"]
    rows = [list(range(5, 12)), list(range(20, 24))]
    batch = np.full((2, 7), pad, np.int32)
    batch[0], batch[1, :4] = rows[0], rows[1]
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=7 + 6, do_sample=False, batch_size=2)
    generator = og.Generator(model, params)
    generator.append_tokens(batch)
    while not generator.is_done():
        generator.generate_next_token()
    for i, row in enumerate(rows):
        alone = ours.generate(np.array([row]), max_new_tokens=6, eos_token_id=[])[0, len(row) :]
        got = np.asarray(generator.get_sequence(i))[7:]
        np.testing.assert_array_equal(got, alone, err_msg=f"row {i}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "qwen3", "mistral", "gpt2", "gpt_neox", "phi3"])
@pytest.mark.usefixtures("slow")
def test_other_families_fuse_with_transformers_tokens(name: str, tmp_path: pathlib.Path) -> None:
    """Head size 8 (rotary outside GQA), Qwen3 (q/k norms), Mistral (sliding window),
    GPT-2 (no rotary), NeoX (partial rotary), Phi-3 (packed projections)."""
    if name not in CASES:
        pytest.skip(f"no tiny {name} case")
    _export_and_compare(name, tmp_path, new_tokens=16)


@pytest.mark.slow
@pytest.mark.usefixtures("slow")
def test_a_family_gqa_cannot_take_keeps_the_default_graph(tmp_path: pathlib.Path) -> None:
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=64,
        hidden_size=24,  # head size 6: ORT's CPU GQA needs a multiple of 8
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    with pytest.warns(UserWarning, match="head size 6 is not a multiple of 8"):
        hf.export_pretrained(model, tmp_path / "out", target="onnxruntime")
    assert _ops(tmp_path / "out")["GroupQueryAttention"] == 0
    ids, mask = _prompts()
    ort_model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "out")
    assert not ort_model.session.shares_buffer  # no GQA: per-step presents
    with torch.no_grad():
        expected = model.generate(
            ids.remainder(64), attention_mask=mask, max_new_tokens=6, do_sample=False
        )
    got = ort_model.generate(ids.remainder(64).numpy(), mask.numpy(), max_new_tokens=6)
    np.testing.assert_array_equal(got, expected.numpy())


@pytest.fixture(scope="module")
def fused_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pathlib.Path]:
    """The head-size-16 Llama exported with ``target="onnxruntime"`` (once per module)."""
    root = tmp_path_factory.mktemp("fused_llama")
    model = _llama16()
    hf.export_pretrained(model, root / "out", target="onnxruntime")
    return model, root / "out"


def _transformers_tokens(model: Any, batch: int, **kwargs: Any) -> np.ndarray:
    ids, mask = _prompts()
    with torch.no_grad():
        out = model.generate(
            ids[:batch], attention_mask=mask[:batch], do_sample=False, pad_token_id=0, **kwargs
        )
    return np.asarray(out.numpy())


def test_fused_decoder_is_marked_to_share_its_cache_buffer(
    fused_llama: tuple[Any, pathlib.Path],
) -> None:
    from onnx_export.hf.runtime._session import SHARE_BUFFER_KEY
    from onnx_export.passes.ort_gqa import SHARE_BUFFER_KEY as PASS_KEY

    _, folder = fused_llama
    metadata = {p.key: p.value for p in onnx.load(folder / "model.onnx").metadata_props}
    assert SHARE_BUFFER_KEY == PASS_KEY and metadata.get(SHARE_BUFFER_KEY) == "1"
    assert hf.OrtModelForCausalLM.from_pretrained(folder).session.shares_buffer


_FUSED_MODES: dict[str, dict[str, Any]] = {
    "greedy": {"max_new_tokens": 12},
    "repetition": {"repetition_penalty": 1.8, "max_new_tokens": 10},
    "no-repeat-ngram": {"no_repeat_ngram_size": 2, "max_new_tokens": 10},
    "bad-words": {"bad_words_ids": [[7], [40, 41]], "max_new_tokens": 8},
    "beams": {"num_beams": 3, "max_new_tokens": 6},  # per-step presents (rows reorder)
    "beams-return-2": {"num_beams": 3, "num_return_sequences": 2, "max_new_tokens": 5},
}


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("mode", sorted(_FUSED_MODES))
def test_fused_decoder_modes_give_transformers_tokens(
    fused_llama: tuple[Any, pathlib.Path], mode: str, batch: int
) -> None:
    """Greedy and processed decoding run on the shared cache, beam search without it."""
    model, folder = fused_llama
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    ids, mask = _prompts()
    kwargs = _FUSED_MODES[mode]
    got = ours.generate(ids[:batch].numpy(), mask[:batch].numpy(), pad_token_id=0, **kwargs)
    np.testing.assert_array_equal(got, _transformers_tokens(model, batch, **kwargs))


def test_fused_decoder_with_eos_sampling_and_streaming(
    fused_llama: tuple[Any, pathlib.Path],
) -> None:
    """EOS ends rows on the shared cache as on per-step presents; samples and streams too."""
    model, folder = fused_llama
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    ids, mask = _prompts()
    eos = int(ours.generate(ids[:1].numpy(), max_new_tokens=3)[0, -1])
    kwargs: dict[str, Any] = {"max_new_tokens": 10, "eos_token_id": eos, "min_new_tokens": 4}
    got = ours.generate(ids.numpy(), mask.numpy(), pad_token_id=0, **kwargs)
    np.testing.assert_array_equal(got, _transformers_tokens(model, 2, **kwargs))
    sampled = {"max_new_tokens": 10, "do_sample": True, "top_k": 8, "seed": 4}
    shared = ours.generate(ids.numpy(), mask.numpy(), **sampled)
    ours.session.shares_buffer = False  # the same draws from per-step presents
    per_step = ours.generate(ids.numpy(), mask.numpy(), **sampled)
    ours.session.shares_buffer = True
    np.testing.assert_array_equal(shared, per_step)
    streamed = list(ours.stream(ids.numpy(), mask.numpy(), max_new_tokens=6))
    full = ours.generate(ids.numpy(), mask.numpy(), max_new_tokens=6)
    np.testing.assert_array_equal(np.stack(streamed, axis=1), full[:, ids.shape[1] :])


def test_fused_live_sequence_grows_and_rewinds_its_shared_cache(
    fused_llama: tuple[Any, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnx_export.hf.runtime.generation import _live

    monkeypatch.setattr(_live, "_FIRST_CAPACITY", 8)  # grows twice below
    model, folder = fused_llama
    ours = hf.OrtModelForCausalLM.from_pretrained(folder)
    prompt = _prompts()[0][0].numpy()
    full = ours.generate(prompt, max_new_tokens=14)[0]
    live = ours.live(prompt[:4])
    live.append(prompt[4:])
    np.testing.assert_array_equal(live.generate(max_new_tokens=14), full[len(prompt) :])
    live.rewind(5)
    np.testing.assert_array_equal(live.generate(max_new_tokens=5), full[-5:])
    turn = np.array([11, 12, 13], np.int64)
    live.append(turn)
    got = live.generate(max_new_tokens=6)
    history = torch.from_numpy(np.concatenate([full, turn]))[None]
    with torch.no_grad():
        theirs = model.generate(history, max_new_tokens=6, do_sample=False, pad_token_id=0)
    np.testing.assert_array_equal(got, theirs[0, history.shape[1] :].numpy())


def test_fused_decoder_refuses_ids_outside_the_vocabulary_before_onnx_runtime(
    fused_llama: tuple[Any, pathlib.Path], capfd: pytest.CaptureFixture[str]
) -> None:
    model, folder = fused_llama
    ort_model = hf.OrtModelForCausalLM.from_pretrained(folder)
    vocab = int(model.config.vocab_size)
    capfd.readouterr()
    with pytest.raises(hf.GenerationError, match=rf"\[{vocab}\] outside the model's vocabulary"):
        ort_model.generate([[3, vocab]], max_new_tokens=2)
    assert "INVALID_ARGUMENT" not in capfd.readouterr().err  # no raw ONNX Runtime log line
    ids, _ = _prompts()
    expected = _transformers_tokens(model, 1, max_new_tokens=2)
    np.testing.assert_array_equal(ort_model.generate(ids[:1].numpy(), max_new_tokens=2), expected)
