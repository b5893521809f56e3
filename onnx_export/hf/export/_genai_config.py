"""``genai_config.json`` beside a ``target="onnxruntime"`` decoder, for onnxruntime-genai.

onnxruntime-genai's ``og.Model(folder)`` reads this file to drive a decoder: the graph's
input and output names (ours: ``input_ids``, ``attention_mask``, ``position_ids``,
``past_key_values.%d.key``/``.value``; ``logits``, ``present.%d.key``/``.value``), the
head counts and sizes, the special tokens and the search defaults (from
``generation_config.json``). ``past_present_share_buffer`` is true when the export
marked the graph so (``onnx_export.past_present_share_buffer``: every past goes to one
GroupQueryAttention only, which updates the cache in place): genai then binds each past
and its present to one max-length buffer, as for its own graphs. Otherwise the presents
are new tensors (past + new) that genai passes back as the next pasts. Written by
:func:`onnx_export.hf.export_pretrained` only; nothing here imports onnxruntime-genai.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from onnx_export.hf.runtime._session import SHARE_BUFFER_KEY

__all__ = ["GENAI_CONFIG_NAME", "write_genai_config"]

GENAI_CONFIG_NAME = "genai_config.json"

# Model types genai knows by name; any other decoder runs as genai's generic "llama".
_GENAI_TYPES = {
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "granite",
    "olmo",
    "nemotron",
    "chatglm",
    "gpt2",
}


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def _search(generation: Any, context: int, share_buffer: bool) -> dict[str, Any]:
    def get(name: str, default: Any) -> Any:
        value = getattr(generation, name, None) if generation is not None else None
        return default if value is None else value

    return {
        "do_sample": bool(get("do_sample", False)),
        "max_length": int(get("max_length", context) or context),
        "min_length": int(get("min_length", 0)),
        "num_beams": int(get("num_beams", 1)),
        "num_return_sequences": int(get("num_return_sequences", 1)),
        "repetition_penalty": float(get("repetition_penalty", 1.0)),
        "no_repeat_ngram_size": int(get("no_repeat_ngram_size", 0)),
        "length_penalty": float(get("length_penalty", 1.0)),
        "early_stopping": bool(get("early_stopping", True)),
        "temperature": float(get("temperature", 1.0)),
        "top_k": int(get("top_k", 50)),
        "top_p": float(get("top_p", 1.0)),
        "diversity_penalty": 0.0,
        "past_present_share_buffer": share_buffer,
    }


def write_genai_config(folder: pathlib.Path, model: Any) -> str:
    """Write ``genai_config.json`` for the decoder ``model.onnx`` in ``folder``; its name."""
    import onnx

    proto = onnx.load(folder / "model.onnx", load_external_data=False)
    graph = proto.graph
    metadata = {entry.key: entry.value for entry in proto.metadata_props}
    share_buffer = metadata.get(SHARE_BUFFER_KEY) == "1"
    input_names = [i.name for i in graph.input]
    config = model.config
    heads = int(config.num_attention_heads)
    hidden = int(config.hidden_size)
    head_size = int(getattr(config, "head_dim", None) or hidden // heads)
    context = int(getattr(config, "max_position_embeddings", 0) or 2048)
    eos = _first(getattr(config, "eos_token_id", None))
    pad = getattr(config, "pad_token_id", None)
    inputs = {"input_ids": "input_ids", "attention_mask": "attention_mask"}
    if "position_ids" in input_names:
        inputs["position_ids"] = "position_ids"
    inputs |= {
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    model_type = str(getattr(config, "model_type", "llama"))
    body = {
        "model": {
            "bos_token_id": getattr(config, "bos_token_id", None) or 0,
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnx-export", "provider_options": []},
                "filename": "model.onnx",
                "head_size": head_size,
                "hidden_size": hidden,
                "inputs": inputs,
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": heads,
                "num_hidden_layers": int(config.num_hidden_layers),
                "num_key_value_heads": int(getattr(config, "num_key_value_heads", None) or heads),
            },
            "eos_token_id": eos if eos is not None else 0,
            "pad_token_id": pad if pad is not None else (eos if eos is not None else 0),
            "type": model_type if model_type in _GENAI_TYPES else "llama",
            "vocab_size": int(config.vocab_size),
        },
        "search": _search(getattr(model, "generation_config", None), context, share_buffer),
    }
    (folder / GENAI_CONFIG_NAME).write_text(json.dumps(body, indent=4) + "\n")
    return GENAI_CONFIG_NAME
