"""The model zoo: small-config transformers models and torch.nn patterns, with their inputs.

Shared by ``tests/e2e/test_zoo.py`` (the ``small`` tier runs in CI) and
``bench/bench_zoo.py`` (every model, side by side with torch.onnx). Each :class:`ZooModel`
builds a model with random weights (no hub access), its example inputs, inputs of
other sizes for dynamic exports, and the dynamic dims in the exporter's simple form
(``{"input": {axis: "name"}}``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["ZooModel", "ZOO", "Inputs", "small_config", "small_decoder_config"]

#: (args, kwargs) of one call.
Inputs = tuple[tuple[Any, ...], dict[str, Any]]

VOCAB = 100


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One zoo entry.

    Attributes:
        name: Short id, e.g. ``"bert"``.
        tier: ``"small"`` (CI) or ``"full"`` (bench and ``--runslow``).
        build: Returns the model (eval mode, fixed seed).
        inputs: Returns the example inputs for a size ``(batch, length)``.
        dynamic: Dynamic dims by input name, or ``None`` when the model has none.
        other_sizes: Sizes the dynamic export must also be right at.
        atol: Absolute tolerance of the comparison with eager.
    """

    name: str
    tier: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, int], Inputs]
    dynamic: dict[str, Any] | None
    other_sizes: tuple[tuple[int, int], ...] = ((3, 5),)
    atol: float = 1e-4
    size: tuple[int, int] = (2, 8)


def _seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return make().eval()

    return build


def _text(batch: int, length: int) -> Inputs:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, -1] = 0
    return (), {"input_ids": ids, "attention_mask": mask}


_TEXT_DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def _image(channels: int, side: int) -> Callable[[int, int], Inputs]:
    def inputs(batch: int, _: int) -> Inputs:
        generator = torch.Generator().manual_seed(batch)
        return (torch.randn(batch, channels, side, side, generator=generator),), {}

    return inputs


def _float_sequence(features: int) -> Callable[[int, int], Inputs]:
    def inputs(batch: int, length: int) -> Inputs:
        generator = torch.Generator().manual_seed(batch * 100 + length)
        return (torch.randn(batch, length, features, generator=generator),), {}

    return inputs


class _Hidden(nn.Module):
    """Returns ``last_hidden_state`` (and nothing else) of a transformers text model."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, attention_mask=attention_mask).last_hidden_state  # type: ignore[no-any-return]


class _Vision(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values).last_hidden_state  # type: ignore[no-any-return]


class _Audio(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.model(input_values).last_hidden_state  # type: ignore[no-any-return]


class _Mel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.model(input_features).last_hidden_state  # type: ignore[no-any-return]


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, attention_mask=attention_mask).logits  # type: ignore[no-any-return]


# -- transformers ----------------------------------------------------------------------


def _tf() -> Any:
    import transformers

    return transformers


_SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
}


#: The small configurations every test and benchmark builds its transformers models from:
#: ``family -> (config class, keyword arguments)``; see :func:`small_config`.
_SEQ2SEQ: dict[str, Any] = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 37,
    "decoder_ffn_dim": 37,
}
_T5 = {"d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2, "num_heads": 4}
_FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("BertConfig", {"max_position_embeddings": 64, **_SMALL}),
    "gpt2": ("GPT2Config", {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}),
    "llama": ("LlamaConfig", {"max_position_embeddings": 64, "num_key_value_heads": 2, **_SMALL}),
    "t5": ("T5Config", {"decoder_start_token_id": 0, **_T5}),
    "bart": ("BartConfig", {"max_position_embeddings": 64, **_SEQ2SEQ}),
    "whisper": ("WhisperConfig", {"num_mel_bins": 16, "max_source_positions": 16, **_SEQ2SEQ}),
}


def small_config(family: str, **overrides: Any) -> Any:
    """A small transformers configuration of ``family`` (random weights, vocabulary 100).

    The one place the tests and benchmarks take their small BERT, GPT-2, Llama, T5, BART and
    Whisper configs from (other decoders: :func:`small_decoder_config`); ``overrides``
    change or add fields (``use_cache=False``, ``attn_implementation``, token ids).
    """
    config_class, fields = _FAMILIES[family]
    return getattr(_tf(), config_class)(**({"vocab_size": VOCAB} | fields | overrides))


def small_decoder_config(config_class: str, **overrides: Any) -> Any:
    """A small config of any Llama-shaped decoder (``"Qwen2Config"``, ``"MistralConfig"``...)."""
    fields = {"vocab_size": VOCAB, "max_position_embeddings": 64, **_SMALL}
    return getattr(_tf(), config_class)(**(fields | overrides))


def _decoder(config_class: str, model_class: str, **extra: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        config = small_decoder_config(config_class, use_cache=False, **extra)
        return _Logits(getattr(_tf(), model_class)(config))

    return make


def _bert() -> nn.Module:
    tf = _tf()
    return _Hidden(tf.BertModel(small_config("bert")))


def _roberta() -> nn.Module:
    tf = _tf()
    config = tf.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=64, **_SMALL)
    return _Hidden(tf.RobertaModel(config))


def _albert() -> nn.Module:
    tf = _tf()
    config = tf.AlbertConfig(
        vocab_size=VOCAB, max_position_embeddings=64, embedding_size=16, **_SMALL
    )
    return _Hidden(tf.AlbertModel(config))


def _deberta() -> nn.Module:
    tf = _tf()
    config = tf.DebertaV2Config(vocab_size=VOCAB, max_position_embeddings=64, **_SMALL)
    return _Hidden(tf.DebertaV2Model(config))


def _gpt2() -> nn.Module:
    tf = _tf()
    return _Logits(tf.GPT2LMHeadModel(small_config("gpt2", use_cache=False)))


class _EncoderDecoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids)
        return out.last_hidden_state  # type: ignore[no-any-return]


def _t5() -> nn.Module:
    tf = _tf()
    return _EncoderDecoder(tf.T5Model(small_config("t5", use_cache=False)))


def _bart() -> nn.Module:
    tf = _tf()
    return _EncoderDecoder(tf.BartModel(small_config("bart", use_cache=False)))


def _vit() -> nn.Module:
    tf = _tf()
    config = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, **_SMALL)
    return _Vision(tf.ViTModel(config))


def _swin() -> nn.Module:
    tf = _tf()
    config = tf.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16,
                           depths=[1, 1], num_heads=[2, 2], window_size=4)  # fmt: skip
    return _Vision(tf.SwinModel(config))


def _convnext() -> nn.Module:
    tf = _tf()
    config = tf.ConvNextConfig(
        num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32
    )
    return _Vision(tf.ConvNextModel(config))


def _resnet() -> nn.Module:
    tf = _tf()
    config = tf.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    return _Vision(tf.ResNetModel(config))


def _clip_vision() -> nn.Module:
    tf = _tf()
    config = tf.CLIPVisionConfig(image_size=32, patch_size=8, **_SMALL)
    return _Vision(tf.CLIPVisionModel(config))


def _whisper_encoder() -> nn.Module:
    tf = _tf()
    ids = {"pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "decoder_start_token_id": 0}
    return _Mel(tf.WhisperModel(small_config("whisper", **ids)).get_encoder())


def _wav2vec2() -> nn.Module:
    tf = _tf()
    config = tf.Wav2Vec2Config(
        vocab_size=VOCAB,
        conv_dim=(8, 8),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        **_SMALL,
    )
    return _Audio(tf.Wav2Vec2Model(config))


def _audio(batch: int, length: int) -> Inputs:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    return (torch.randn(batch, length * 40, generator=generator),), {}


def _mel(batch: int, _: int) -> Inputs:
    generator = torch.Generator().manual_seed(batch)
    return (torch.randn(batch, 16, 32, generator=generator),), {}


class CachedDecoder(nn.Module):
    """A causal LM called with its cache as lists of key and value tensors, which it
    turns into a ``DynamicCache``, returning logits and the updated cache, flattened."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        past_keys: list[torch.Tensor],
        past_values: list[torch.Tensor],
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=list(zip(past_keys, past_values, strict=True)))
        out = self.model(input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        layers = out.past_key_values.layers
        return out.logits, [layer.keys for layer in layers], [layer.values for layer in layers]


def _cached_llama() -> nn.Module:
    return CachedDecoder(_tf().LlamaForCausalLM(small_config("llama")))


def _cached_inputs(batch: int, length: int) -> Inputs:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    past = length + 1
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, past + length, dtype=torch.long)
    keys = [torch.randn(batch, 2, past, 8, generator=generator) for _ in range(2)]
    values = [torch.randn(batch, 2, past, 8, generator=generator) for _ in range(2)]
    return (ids, mask, keys, values), {}


def _cache_object_llama() -> nn.Module:
    """A causal LM as users call it in a decoding loop: ``model(ids, mask, cache=cache)``."""
    return _tf().LlamaForCausalLM(small_config("llama"))  # type: ignore[no-any-return]


def _cache_object_inputs(batch: int, length: int) -> Inputs:
    """Token ids, mask and a ``transformers`` ``DynamicCache`` holding ``length + 1`` steps."""
    from transformers import DynamicCache

    (ids, mask, keys, values), _ = _cached_inputs(batch, length)
    cache = DynamicCache()
    for layer, (key, value) in enumerate(zip(keys, values, strict=True)):
        cache.update(key, value, layer)
    return (ids,), {"attention_mask": mask, "cache": cache}


_PAST = {0: "batch", 2: "past"}
_CACHE_OBJECT_DYNAMIC = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "total"},
    "cache": [[_PAST, _PAST], [_PAST, _PAST]],  # DynamicCache: key list, value list
}

_CACHE_DYNAMIC = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "total"},
    "past_keys": [{0: "batch", 2: "past"}] * 2,
    "past_values": [{0: "batch", 2: "past"}] * 2,
}


# -- torch.nn patterns -----------------------------------------------------------------


class _LSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class _GRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class _MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.attention(x, x, x)  # type: ignore[no-any-return]


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


class _Hooked(nn.Module):
    """Forward pre- and post-hooks that change the input and the output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.linear.register_forward_pre_hook(lambda _, args: (args[0] * 2.0,))
        self.linear.register_forward_hook(lambda _, __, out: out + 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, use_reentrant=False)  # type: ignore[no-any-return]


class _EMA(nn.Module):
    """An ``AveragedModel`` (exponential moving average) after one update, as exported."""

    def __init__(self) -> None:
        super().__init__()
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

        base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.averaged = AveragedModel(base, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        with torch.no_grad():
            for p in base.parameters():
                p.add_(0.1)
        self.averaged.update_parameters(base)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.averaged(x)  # type: ignore[no-any-return]


class _Cond(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, self.linear, torch.neg, (x,))


class _BufferUpdate(nn.Module):
    """Updates a running buffer in place and uses the updated value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.running.mul_(0.9).add_(x.mean(dim=(0, 1)) * 0.1)
        return x - self.running


def _llama() -> nn.Module:
    return _Logits(_tf().LlamaForCausalLM(small_config("llama", use_cache=False)))


_qwen2 = _decoder("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2)
_mistral = _decoder("MistralConfig", "MistralForCausalLM", num_key_value_heads=2)
_gemma = _decoder("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=2, head_dim=8)
_phi = _decoder("PhiConfig", "PhiForCausalLM")
# Expert weights' strides must be multiples of 16 bytes for torch._grouped_mm in eager.
_mixtral = _decoder(
    "MixtralConfig",
    "MixtralForCausalLM",
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
    intermediate_size=40,
)

_SEQ8_DYNAMIC = {"x": {0: "batch", 1: "seq"}}
_IMAGE_DYNAMIC = {"pixel_values": {0: "batch"}}

ZOO: dict[str, ZooModel] = {
    z.name: z
    for z in [
        # torch.nn patterns (small tier: fast)
        # RNN ops specialise the sequence length in torch.export: only the batch is dynamic.
        ZooModel(
            "lstm", "small", _seeded(_LSTM), _float_sequence(8), {"x": {0: "batch"}}, ((3, 8),)
        ),
        ZooModel("gru", "small", _seeded(_GRU), _float_sequence(8), {"x": {0: "batch"}}, ((3, 8),)),
        ZooModel(
            "transformer_encoder",
            "small",
            _seeded(_encoder),
            _float_sequence(8),
            {"src": {0: "batch", 1: "seq"}},
        ),
        ZooModel("multihead_attention", "small", _seeded(_MHA), _float_sequence(8), _SEQ8_DYNAMIC),
        ZooModel("hooks", "small", _seeded(_Hooked), _float_sequence(8), _SEQ8_DYNAMIC),
        ZooModel("checkpoint", "small", _seeded(_Checkpointed), _float_sequence(8), _SEQ8_DYNAMIC),
        ZooModel("ema_averaged_model", "small", _seeded(_EMA), _float_sequence(8), _SEQ8_DYNAMIC),
        ZooModel("torch_cond", "small", _seeded(_Cond), _float_sequence(8), _SEQ8_DYNAMIC),
        ZooModel(
            "buffer_update", "small", _seeded(_BufferUpdate), _float_sequence(8), _SEQ8_DYNAMIC
        ),
        # transformers
        ZooModel("bert", "full", _seeded(_bert), _text, _TEXT_DYNAMIC),
        ZooModel("roberta", "full", _seeded(_roberta), _text, _TEXT_DYNAMIC),
        ZooModel("albert", "full", _seeded(_albert), _text, _TEXT_DYNAMIC),
        ZooModel("deberta", "full", _seeded(_deberta), _text, _TEXT_DYNAMIC),
        ZooModel("gpt2", "full", _seeded(_gpt2), _text, _TEXT_DYNAMIC),
        ZooModel("llama", "full", _seeded(_llama), _text, _TEXT_DYNAMIC),
        ZooModel("qwen2", "full", _seeded(_qwen2), _text, _TEXT_DYNAMIC),
        ZooModel("mistral", "full", _seeded(_mistral), _text, _TEXT_DYNAMIC),
        ZooModel("gemma", "full", _seeded(_gemma), _text, _TEXT_DYNAMIC),
        ZooModel("phi", "full", _seeded(_phi), _text, _TEXT_DYNAMIC),
        ZooModel("mixtral_moe", "full", _seeded(_mixtral), _text, _TEXT_DYNAMIC),
        ZooModel("t5", "small", _seeded(_t5), _text, _TEXT_DYNAMIC),
        ZooModel("bart", "full", _seeded(_bart), _text, _TEXT_DYNAMIC),
        ZooModel("vit", "small", _seeded(_vit), _image(3, 32), _IMAGE_DYNAMIC),
        ZooModel("swin", "full", _seeded(_swin), _image(3, 32), _IMAGE_DYNAMIC),
        ZooModel("convnext", "full", _seeded(_convnext), _image(3, 32), _IMAGE_DYNAMIC),
        ZooModel("resnet", "full", _seeded(_resnet), _image(3, 32), _IMAGE_DYNAMIC),
        ZooModel("clip_vision", "full", _seeded(_clip_vision), _image(3, 32), _IMAGE_DYNAMIC),
        ZooModel(
            "whisper_encoder",
            "full",
            _seeded(_whisper_encoder),
            _mel,
            {"input_features": {0: "batch"}},
        ),
        ZooModel(
            "wav2vec2",
            "full",
            _seeded(_wav2vec2),
            _audio,
            {"input_values": {0: "batch", 1: "samples"}},
        ),
        ZooModel(
            "llama_dynamic_cache", "small", _seeded(_cached_llama), _cached_inputs, _CACHE_DYNAMIC
        ),
        ZooModel(
            "llama_cache_object",
            "small",
            _seeded(_cache_object_llama),
            _cache_object_inputs,
            _CACHE_OBJECT_DYNAMIC,
        ),
    ]
}


# -- running one case ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ZooResult:
    """One export of one zoo model, checked in ONNX Runtime against eager at every size.

    Attributes:
        status: ``"pass"`` or ``"fail"``.
        reason: Why it failed (stage and first line of the error).
        export_seconds: Export wall time.
        max_error: Largest absolute difference from eager over every size and output.
        nodes: Nodes of the main graph (``0`` when the export failed).
        file_bytes: Size of the saved model (``0`` unless measured).
        latency_ms: Median ONNX Runtime call time at the example size, adapter included
            (``0`` unless measured).
        opset: The default-domain opset the exported file declares (``0`` when the export
            failed).
    """

    status: str
    reason: str = ""
    export_seconds: float = 0.0
    max_error: float = 0.0
    nodes: int = 0
    file_bytes: int = 0
    latency_ms: float = 0.0
    opset: int = 0


def _leaves(outputs: Any) -> list[torch.Tensor]:
    import numpy as np
    from torch.utils import _pytree as pytree

    found = []
    for leaf in pytree.tree_leaves(outputs):
        tensor = torch.from_numpy(leaf) if isinstance(leaf, np.ndarray) else leaf
        if isinstance(tensor, torch.Tensor):
            found.append(tensor.detach())
    return found


def _export(
    exporter: str, model: nn.Module, inputs: Inputs, dynamic: Any, opset: int | None = None
) -> Callable[..., Any]:
    args, kwargs = inputs
    if exporter == "ours":
        import onnx_export

        options = onnx_export.ExportOptions(dynamic_shapes=dynamic)
        if opset is not None:
            options = dataclasses.replace(options, opset_version=opset)
        return onnx_export.dynamo_export(model, *args, export_options=options, **kwargs)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # only bench/ compares with torch.onnx
        extra = {} if opset is None else {"opset_version": opset}
        theirs = torch.onnx.export(
            model, args, kwargs=kwargs, dynamic_shapes=dynamic, dynamo=True, verbose=False, **extra
        )
    assert theirs is not None
    return theirs


def _first_line(error: BaseException) -> str:
    """The error's first line, and the first line of its root cause when that differs."""
    text = (str(error).strip().splitlines() or [""])[0]
    root = error
    while root.__cause__ is not None:
        root = root.__cause__
    line = f"{type(error).__name__}: {text}"
    if root is not error:
        line = (
            f"{line[:100]} <- {type(root).__name__}: {(str(root).strip().splitlines() or [''])[0]}"
        )
    return re.sub(r"\x1b\[[0-9;]*m", "", line)[:300]  # no terminal colours


def _measure(run: Any, inputs: Inputs) -> tuple[int, int, float]:
    """Node count, saved size and median call time (ms) of an exported program."""
    import copy
    import statistics
    import tempfile
    import time
    from pathlib import Path

    nodes = len(list(run.model.graph))
    with tempfile.TemporaryDirectory() as folder:
        run.save(str(Path(folder) / "model.onnx"))
        size = sum(f.stat().st_size for f in Path(folder).iterdir())
    args, kwargs = inputs
    times = []
    for _ in range(6):
        call_args, call_kwargs = copy.deepcopy((args, kwargs))
        start = time.perf_counter()
        run(*call_args, **call_kwargs)
        times.append(time.perf_counter() - start)
    return nodes, size, statistics.median(times[1:]) * 1000


def _declared_opset(run: Any) -> int:
    """The default-domain opset the exported model declares (either exporter's program)."""
    return int(run.model.opset_imports.get("", 0))


def check(
    exporter: str,
    entry: ZooModel,
    *,
    dynamic: bool,
    grad: bool,
    measure: bool = False,
    opset: int | None = None,
) -> ZooResult:
    """Export ``entry`` with ``exporter`` (grad mode on or off), compare with eager.

    Inputs are copied for each call, as a model may update them in place (a cache).
    ``measure`` also saves the model and times ONNX Runtime calls (for the benchmark).
    ``opset`` asks the exporter for that opset (``None``: its default); the result records
    the opset the file declares.
    """
    import copy
    import time

    try:
        original = entry.build()
    except Exception as e:
        return ZooResult("fail", f"[build] {_first_line(e)}")
    example = entry.inputs(*entry.size)
    start = time.perf_counter()
    try:
        with torch.set_grad_enabled(grad):
            run = _export(
                exporter,
                copy.deepcopy(original),
                copy.deepcopy(example),
                entry.dynamic if dynamic else None,
                opset,
            )
    except Exception as e:
        return ZooResult("fail", f"[export] {_first_line(e)}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    declared = _declared_opset(run)
    sizes = [entry.size, *(entry.other_sizes if dynamic else ())]
    worst = 0.0
    for size in sizes:
        args, kwargs = entry.inputs(*size)
        with torch.no_grad():
            expected = _leaves(
                copy.deepcopy(original)(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            )
        try:
            actual = _leaves(run(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
        except Exception as e:
            return ZooResult("fail", f"[run {size}] {_first_line(e)}", seconds, opset=declared)
        if len(actual) != len(expected):
            return ZooResult(
                "fail",
                f"[compare {size}] {len(actual)} outputs, eager {len(expected)}",
                seconds,
                opset=declared,
            )
        for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
            if got.shape != want.shape or got.dtype != want.dtype:
                why = (
                    f"output {i}: {tuple(got.shape)} {got.dtype}, "
                    f"eager {tuple(want.shape)} {want.dtype}"
                )
                return ZooResult("fail", f"[compare {size}] {why}", seconds, opset=declared)
            error = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
            worst = max(worst, error)
            if not torch.allclose(got, want, rtol=1e-3, atol=entry.atol, equal_nan=True):
                return ZooResult(
                    "fail",
                    f"[compare {size}] output {i}: max abs error {error:.3g}",
                    seconds,
                    opset=declared,
                )
    if not measure:
        return ZooResult("pass", "", seconds, worst, opset=declared)
    nodes, file_bytes, latency = _measure(run, example)
    return ZooResult("pass", "", seconds, worst, nodes, file_bytes, latency, declared)
