"""Tools in chat templates: ``tools=`` (and ``documents=``) reach the template as in transformers.

The llama folder of ``test_hf_generate_text`` with a template that lists the tools (names
and required arguments as JSON: the tiny model has 64 positions) and the documents; the
rendered text and the generated answer equal transformers' ``apply_chat_template(...,
tools=...)`` and ``generate()``.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import torch

from onnx_export import hf
from tests.hf.conftest import Exported
from tests.hf.test_hf_generate_text import _tokenizer_files
from tests.hf.torch_free import Call, run_without_torch

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

_TEMPLATE = (
    "{{ bos_token }}{% if tools %}system says {% for t in tools %}"
    "{{ t['function']['name'] }} {{ t['function']['parameters']['required'] | tojson }} "
    "{% endfor %}{% endif %}"
    "{% if documents %}{% for d in documents %}{{ d['title'] }} {% endfor %}{% endif %}"
    "{% for m in messages %}{{ m['role'] }} says {{ m['content'] | trim }} {% endfor %}"
    "{% if add_generation_prompt %}assistant says{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "kalo",
        "description": "mi ne",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "su ta"}},
            "required": ["city"],
        },
    },
}
MESSAGES = [{"role": "user", "content": "kaka kalo kami"}]


@pytest.fixture(scope="module")
def with_tools(
    exported: Callable[[str], Exported], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Exported, pathlib.Path, Any]:
    """The exported llama with a tokenizer whose chat template lists tools and documents."""
    import transformers

    case = exported("llama")
    folder = tmp_path_factory.mktemp("tools") / "onnx"
    shutil.copytree(case.folder, folder)
    _tokenizer_files(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = _TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return case, folder, transformers.AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [WEATHER]},
        {"tools": [WEATHER, {**WEATHER, "function": {**WEATHER["function"], "name": "mine"}}]},
        {"documents": [{"title": "lone", "text": "losu"}]},
        {},
    ],
    ids=["one-tool", "two-tools", "documents", "none"],
)
def test_tools_render_and_generate_like_transformers(
    with_tools: tuple[Exported, pathlib.Path, Any], extra: dict[str, Any]
) -> None:
    case, folder, tok = with_tools
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    rendered = model.tokenizer.render_chat(MESSAGES, **extra)
    expected = tok.apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True, **extra
    )
    assert rendered == expected
    assert ('kalo ["city"]' in rendered) == ("tools" in extra)
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True, **extra)
    ids = torch.tensor([ids["input_ids"]])
    with torch.no_grad():
        out = case.model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
    answer = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert model.generate_text(MESSAGES, max_new_tokens=6, **extra) == answer
    assert model.generate(MESSAGES, max_new_tokens=6, **extra) == answer


def test_tools_without_torch(with_tools: tuple[Exported, pathlib.Path, Any]) -> None:
    _, folder, _ = with_tools
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    expected = model.generate_text(MESSAGES, max_new_tokens=5, tools=[WEATHER])
    kwargs = {"prompt": MESSAGES, "max_new_tokens": 5, "tools": [WEATHER]}
    got = run_without_torch(folder, [Call("text", "generate_text", {}, kwargs)])
    assert str(got["text"]) == expected


def _weather(city: str) -> str:
    """Tell the weather.

    Args:
        city: Where.
    """
    return city


@pytest.mark.parametrize(
    ("prompt", "extra", "message"),
    [
        (MESSAGES, {"tools": [_weather]}, "get_json_schema"),
        (MESSAGES, {"tools": WEATHER}, "tools must be a list of JSON schemas"),
        ("kaka", {"tools": [WEATHER]}, "pass the prompt as chat messages"),
        (MESSAGES, {"documents": ["losu"]}, "documents must be a list of dicts"),
    ],
    ids=["callable", "not-a-list", "text-prompt", "bad-documents"],
)
def test_bad_tools_say_what_to_pass(
    with_tools: tuple[Exported, pathlib.Path, Any], prompt: Any, extra: dict[str, Any], message: str
) -> None:
    _, folder, _ = with_tools
    model = hf.OrtModelForCausalLM.from_pretrained(folder)
    with pytest.raises(hf.GenerationError, match=message):
        model.generate_text(prompt, max_new_tokens=2, **extra)
