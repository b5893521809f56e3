"""LoRA adapters: the base model exported once with its targets' A/B factors as inputs;
PEFT adapter folders loaded into the torch-free runtime and switched per call, each giving
the tokens transformers gives with that adapter merged (peft's ``merge_and_unload``);
adapters the graph cannot take refused with the reason."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from onnx_export import hf
from onnx_export.cli import main
from onnx_export.hf._safetensors import read_safetensors
from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported
from tests.hf.torch_free import Call, run_without_torch

peft = pytest.importorskip("peft")

#: Two prompts, the first left-padded: positions and masks go through the adapters too.
IDS = torch.tensor([[0, 0, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
MASK = (IDS != 0).long()


@dataclasses.dataclass(frozen=True)
class Setup:
    """A base checkpoint, PEFT adapters of it, and their merged eager models."""

    root: pathlib.Path
    base: Any
    adapters: dict[str, pathlib.Path]
    merged: dict[str | None, Any]

    def tokens(self, name: str | None, **kwargs: Any) -> np.ndarray:
        """transformers' greedy tokens with adapter ``name`` merged (``None``: the base)."""
        with torch.no_grad():
            out = self.merged[name].generate(
                IDS, attention_mask=MASK, do_sample=False, pad_token_id=0, **kwargs
            )
        return out.numpy()  # type: ignore[no-any-return]


def _make_adapter(base: Any, folder: pathlib.Path, seed: int, **config: Any) -> Any:
    """Save a PEFT adapter of ``base`` with random non-zero A and B; return it merged."""
    torch.manual_seed(seed)
    model = peft.get_peft_model(
        copy.deepcopy(base), peft.LoraConfig(init_lora_weights=False, **config)
    )
    model.save_pretrained(folder)
    return model.merge_and_unload().eval()


def _setup(root: pathlib.Path, case: str, adapters: dict[str, dict[str, Any]]) -> Setup:
    base = CASES[case].save(root / "checkpoint")
    folders = {name: root / name for name in adapters}
    merged: dict[str | None, Any] = {None: base}
    for seed, (name, config) in enumerate(adapters.items()):
        merged[name] = _make_adapter(base, folders[name], seed + 1, **config)
    return Setup(root, base, folders, merged)


_LLAMA_ADAPTERS = {
    "a": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    # rsLoRA, mixed ranks and alphas, the second layer only: all folded at load time
    "b": {
        "r": 2,
        "lora_alpha": 16,
        "use_rslora": True,
        "target_modules": ["q_proj", "v_proj"],
        "rank_pattern": {"v_proj": 3},
        "alpha_pattern": {"q_proj": 4},
        "layers_to_transform": [1],
    },
    "c": {"r": 8, "lora_alpha": 8, "target_modules": ["q_proj"]},
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    """A tiny Llama exported once from the command line with q_proj and v_proj targets."""
    setup = _setup(tmp_path_factory.mktemp("lora"), "llama", _LLAMA_ADAPTERS)
    code = main(
        [
            "hf",
            str(setup.root / "checkpoint"),
            "-o",
            str(setup.root / "onnx"),
            "--lora-targets",
            "q_proj,v_proj",
        ]
    )
    assert code == 0
    return setup


def _loaded(setup: Setup, folder: str = "onnx") -> Any:
    model = hf.OrtModelForCausalLM.from_pretrained(setup.root / folder)
    for name, path in setup.adapters.items():
        assert model.load_adapter(path, name=name) == name
    return model


def test_the_export_takes_each_targets_factors_as_inputs(llama: Setup) -> None:
    graph = onnx.load(llama.root / "onnx" / "model.onnx", load_external_data=False).graph
    shapes = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in graph.input
        if i.name.startswith("lora.")
    }
    assert len(shapes) == 2 * 2 * 2  # 2 layers, q_proj and v_proj, A and B
    assert shapes["lora.model.layers.1.self_attn.q_proj.A"] == ["lora_rank", 32]
    assert shapes["lora.model.layers.1.self_attn.v_proj.B"] == [16, "lora_rank"]
    manifest = json.loads((llama.root / "onnx" / "onnx_export.json").read_text())
    assert manifest["lora"] == {"targets": ["q_proj", "v_proj"]}


def test_each_adapter_gives_the_merged_models_tokens_switched_in_any_order(
    llama: Setup,
) -> None:
    model = _loaded(llama)
    assert model.adapters == ("a", "b", "c")
    seen = set()
    for name in ["a", None, "b", "c", "a", None]:
        got = model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=8, adapter=name)
        np.testing.assert_array_equal(got, llama.tokens(name, max_new_tokens=8), err_msg=name)
        seen.add(tuple(got[1, 6:]))
    assert len(seen) == 4  # each adapter changes the tokens


def test_set_adapter_is_every_calls_default_and_adapter_picks_another(llama: Setup) -> None:
    model = _loaded(llama)
    model.set_adapter("b")
    assert model.active_adapter == "b"
    np.testing.assert_array_equal(
        model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=6),
        llama.tokens("b", max_new_tokens=6),
    )
    np.testing.assert_array_equal(  # beam search with another adapter, for one call
        model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=5, num_beams=2, adapter="a"),
        llama.tokens("a", max_new_tokens=5, num_beams=2),
    )
    streamed = np.stack(list(model.stream(IDS.numpy(), MASK.numpy(), max_new_tokens=5)), axis=1)
    np.testing.assert_array_equal(streamed, llama.tokens("b", max_new_tokens=5)[:, 6:])
    with torch.no_grad():
        expected = llama.merged["b"](IDS[1:]).logits.numpy()
    np.testing.assert_allclose(model.logits(IDS[1:].numpy()), expected, rtol=1e-4, atol=1e-4)
    model.unload_adapter("b")  # the active one: the base model is the default again
    assert model.active_adapter is None and model.adapters == ("a", "c")
    np.testing.assert_array_equal(
        model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=6),
        llama.tokens(None, max_new_tokens=6),
    )


def test_an_adapter_of_the_backbone_fits_its_causal_lm(
    llama: Setup, tmp_path: pathlib.Path
) -> None:
    """PEFT on ``LlamaModel`` names ``layers.0...``; the export has ``model.layers.0...``."""
    merged = _make_adapter(llama.base.model, tmp_path / "backbone", 7, target_modules=["v_proj"])
    head = copy.deepcopy(llama.base)
    head.model = merged
    model = _loaded(llama)
    model.load_adapter(tmp_path / "backbone", name="backbone")
    got = model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=6, adapter="backbone")
    with torch.no_grad():
        want = head.generate(IDS, attention_mask=MASK, do_sample=False, max_new_tokens=6)
    np.testing.assert_array_equal(got, want.numpy())
    assert not np.array_equal(got, llama.tokens(None, max_new_tokens=6))


def test_adapters_without_torch(llama: Setup) -> None:
    calls = [
        Call("load", "load_adapter", {}, {"path": str(llama.adapters["b"]), "name": "b"}),
        Call(
            "tokens",
            "generate",
            {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()},
            {"max_new_tokens": 6, "adapter": "b"},
        ),
    ]
    got = run_without_torch(llama.root / "onnx", calls)
    np.testing.assert_array_equal(got["tokens"], llama.tokens("b", max_new_tokens=6))


def test_the_fused_decoder_takes_adapters(llama: Setup) -> None:
    """target="onnxruntime": GroupQueryAttention, the cache shared in place, same tokens."""
    hf.export_pretrained(
        llama.root / "checkpoint",
        llama.root / "fused",
        target="onnxruntime",
        lora=llama.adapters["a"],  # the targets an adapter folder names
    )
    graph = onnx.load(llama.root / "fused" / "model.onnx", load_external_data=False).graph
    assert any(n.op_type == "GroupQueryAttention" for n in graph.node)
    assert not (llama.root / "fused" / "genai_config.json").exists()  # genai lacks the inputs
    model = _loaded(llama, "fused")
    assert model.session.shares_buffer
    for name in ["b", None, "a"]:
        got = model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=8, adapter=name)
        np.testing.assert_array_equal(got, llama.tokens(name, max_new_tokens=8), err_msg=name)


def test_every_linear_of_qwen2_with_biases(tmp_path: pathlib.Path) -> None:
    """A passed model keeps no hook; all-linear targets the projections and the MLP."""
    setup = _setup(
        tmp_path, "qwen2", {"all": {"r": 3, "lora_alpha": 6, "target_modules": "all-linear"}}
    )
    hf.export_pretrained(setup.base, tmp_path / "onnx", lora=["all-linear"])
    assert not [m for m in setup.base.modules() if m._forward_hooks]
    graph = onnx.load(tmp_path / "onnx" / "model.onnx", load_external_data=False).graph
    lora = [i.name for i in graph.input if i.name.startswith("lora.")]
    assert len(lora) == 2 * 7 * 2  # q, k, v, o, gate, up, down of 2 layers; A and B
    model = _loaded(setup)
    for name in ["all", None]:
        got = model.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=8, adapter=name)
        np.testing.assert_array_equal(got, setup.tokens(name, max_new_tokens=8), err_msg=name)


def _ia3(base: Any, folder: pathlib.Path) -> None:
    config = peft.IA3Config(target_modules=["q_proj", "v_proj"], feedforward_modules=[])
    peft.get_peft_model(copy.deepcopy(base), config).save_pretrained(folder)


def _lora(**config: Any) -> Callable[[Any, pathlib.Path], None]:
    def make(base: Any, folder: pathlib.Path) -> None:
        _make_adapter(base, folder, 0, **config)

    return make


def _other_base(base: Any, folder: pathlib.Path) -> None:
    torch.manual_seed(0)
    config = copy.deepcopy(base.config)
    config.hidden_size, config.head_dim = 48, 12
    other = type(base)(config)
    peft.get_peft_model(other, peft.LoraConfig(target_modules=["q_proj"])).save_pretrained(folder)


_REFUSED = {
    "ia3": (_ia3, r"'IA3' adapter; only LoRA"),
    "dora": (_lora(target_modules=["q_proj"], use_dora=True), r"use_dora=True: DoRA"),
    "modules_to_save": (
        _lora(target_modules=["q_proj"], modules_to_save=["lm_head"]),
        r"replaces whole modules",
    ),
    "other_target": (
        _lora(target_modules=["q_proj", "k_proj"]),
        r"adapts model\.layers\.0\.self_attn\.k_proj.*did not make LoRA targets.*"
        r"lora=\['k_proj', 'q_proj', 'v_proj'\]",
    ),
    "other_base": (_other_base, r"32 -> 32 features .* 48 -> 48 .* another base model"),
}


@pytest.mark.parametrize("kind", list(_REFUSED))
def test_adapters_the_graph_cannot_take_are_refused(
    llama: Setup, tmp_path: pathlib.Path, kind: str
) -> None:
    make, message = _REFUSED[kind]
    make(llama.base, tmp_path / kind)
    model = _loaded(llama)
    with pytest.raises(hf.AdapterError, match=message):
        model.load_adapter(tmp_path / kind)
    assert model.adapters == ("a", "b", "c")


def test_names_and_models_without_lora_inputs_are_refused(
    llama: Setup, exported: Callable[[str], Exported], tmp_path: pathlib.Path
) -> None:
    model = _loaded(llama)
    with pytest.raises(hf.AdapterError, match=r"No adapter named 'z' \(loaded: 'a', 'b', 'c'\)"):
        model.generate(IDS.numpy(), max_new_tokens=2, adapter="z")
    with pytest.raises(hf.AdapterError, match="No adapter named 'z'"):
        model.set_adapter("z")
    plain = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(hf.AdapterError, match=r"exported without LoRA inputs.*lora=\['q_proj'"):
        plain.load_adapter(llama.adapters["c"])
    np.testing.assert_array_equal(  # adapter=None on such a model: the model as it is
        plain.generate(IDS.numpy(), MASK.numpy(), max_new_tokens=3, adapter=None),
        llama.tokens(None, max_new_tokens=3),
    )
    with pytest.raises(hf.AdapterError, match="not a folder"):
        model.load_adapter(tmp_path / "missing")


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        (["embed_tokens"], r"'embed_tokens' is a Embedding, not nn\.Linear.*q_proj"),
        (["qproj"], r"'qproj' is not in it"),
        ([], r"give target module names"),
    ],
    ids=["not_linear", "unknown", "empty"],
)
def test_export_refuses_targets_that_are_not_linear_modules(
    llama: Setup, tmp_path: pathlib.Path, lora: list[str], message: str
) -> None:
    with pytest.raises(hf.CheckpointError, match=message):
        hf.export_pretrained(llama.base, tmp_path / "out", lora=lora)
    assert not (tmp_path / "out").exists()


def test_export_refuses_lora_for_other_tasks_and_non_lora_adapters(
    llama: Setup, tmp_path: pathlib.Path
) -> None:
    with pytest.raises(hf.CheckpointError, match="text-generation graph; this export is"):
        hf.export_pretrained(llama.base, tmp_path / "o", task="feature-extraction", lora=["q_proj"])
    _ia3(llama.base, tmp_path / "ia3")
    with pytest.raises(hf.AdapterError, match="'IA3' adapter"):
        hf.export_pretrained(llama.base, tmp_path / "o", lora=tmp_path / "ia3")
    checkpoint, ia3 = str(llama.root / "checkpoint"), str(tmp_path / "ia3")
    assert main(["hf", checkpoint, "-o", str(tmp_path / "o"), "--lora", ia3]) == 2


def test_generate_command_takes_an_adapter(llama: Setup, tmp_path: pathlib.Path) -> None:
    from tests.hf.test_hf_generate_text import PROMPTS, _tokenizer_files

    folder = tmp_path / "onnx"
    shutil.copytree(llama.root / "onnx", folder)
    _tokenizer_files(folder)
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    model.load_adapter(llama.adapters["a"])
    expected = model.generate_text(PROMPTS[1], max_new_tokens=6, adapter="a")
    assert expected != model.generate_text(PROMPTS[1], max_new_tokens=6)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        adapter = str(llama.adapters["a"])
        code = main(
            ["generate", str(folder), PROMPTS[1], "--max-new-tokens", "6", "--adapter", adapter]
        )
    assert code == 0 and out.getvalue() == expected + "\n"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_safetensors_reader_reads_what_safetensors_writes(
    tmp_path: pathlib.Path, dtype: str
) -> None:
    from safetensors.torch import save_file

    tensors = {"w": torch.randn(3, 4).to(getattr(torch, dtype)), "v": torch.arange(5.0)}
    save_file(tensors, tmp_path / "t.safetensors")
    read = read_safetensors(tmp_path / "t.safetensors")
    assert sorted(read) == ["v", "w"]
    np.testing.assert_array_equal(read["w"], tensors["w"].float().numpy())
    np.testing.assert_array_equal(read["v"], tensors["v"].numpy())
    damaged = (tmp_path / "t.safetensors").read_bytes()[:-4]
    (tmp_path / "d.safetensors").write_bytes(damaged)
    with pytest.raises(hf.AdapterError, match="byte range"):
        read_safetensors(tmp_path / "d.safetensors")


def test_half_precision_and_int4_exports_take_adapters(
    llama: Setup, tmp_path: pathlib.Path
) -> None:
    """float16: the factors go in as float16, the tokens are the merged model's.

    int4: the base weights become MatMulNBits, the factors (graph inputs) stay float.
    """
    checkpoint = llama.root / "checkpoint"
    hf.export_pretrained(checkpoint, tmp_path / "fp16", dtype="float16", lora=["q_proj"])
    model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "fp16")
    model.load_adapter(llama.adapters["c"], name="c")
    for name in ["c", None]:
        got = model.generate(IDS[1:].numpy(), max_new_tokens=8, adapter=name)
        with torch.no_grad():
            want = llama.merged[name].generate(IDS[1:], max_new_tokens=8, do_sample=False)
        np.testing.assert_array_equal(got, want.numpy(), err_msg=str(name))
    hf.export_pretrained(checkpoint, tmp_path / "int4", quantize="int4", lora=["q_proj"])
    graph = onnx.load(tmp_path / "int4" / "model.onnx", load_external_data=False).graph
    factors = {i.name for i in graph.input if i.name.startswith("lora.")}
    assert len(factors) == 4 and any(n.op_type == "MatMulNBits" for n in graph.node)
    model = hf.OrtModelForCausalLM.from_pretrained(tmp_path / "int4")
    model.load_adapter(llama.adapters["c"], name="c")
    base = model.logits(IDS[1:].numpy())
    model.set_adapter("c")
    assert not np.allclose(model.logits(IDS[1:].numpy()), base, atol=1e-3)  # it is applied


def test_bfloat16_factors_round_as_torch_rounds() -> None:
    from onnx_export.hf.runtime.generation._adapters import _bfloat16_bits

    values = torch.randn(64) * torch.logspace(-3, 3, 64)
    expected = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(_bfloat16_bits(values.numpy()), expected)
