"""``onnx-export serve FOLDER --openai`` on an image-text-to-text folder: images in chat.

The tiny LLaVA of ``tests/hf/vlm_checkpoints.py`` (a CLIP tower, a Llama, its real
processor and a chat template that writes ``<image>``; 1,024 positions here so a long
answer can be interrupted) is exported and served by a subprocess that cannot import
torch. Images go as OpenAI ``image_url`` parts with PNG data URLs; the greedy answer must
be transformers' ``generate()`` on the same image and prompt (and our pipeline's), whole
or streamed. URLs the server will not fetch, bad base64 and bytes that are no image are
400s naming the part; the queue bound (429) and a client leaving hold as for text.
"""

from __future__ import annotations

import base64
import io
import pathlib
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest

from onnx_export import hf
from tests.serving.openai_server import Server, client, health, running

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
PIL = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")

NAME = "llava"
_NEW = 8


def _build(root: pathlib.Path, family: str) -> tuple[pathlib.Path, Any, Any]:
    """The exported folder, and the eager model and processor it came from."""
    from tests.hf import vlm_checkpoints

    with mock.patch.dict(vlm_checkpoints._TEXT, max_position_embeddings=1024):
        model, processor = vlm_checkpoints.VLM_CASES[family].save(root / "checkpoint")
    hf.export_pretrained(root / "checkpoint", root / family)
    return root / family, model, processor


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, Any, Any]:
    return _build(tmp_path_factory.mktemp("vlm"), NAME)


@pytest.fixture(scope="module")
def server(built: tuple[pathlib.Path, Any, Any]) -> Iterator[Server]:
    with running(built[0], "--max-waiting", "4") as started:
        yield started


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((height, width, 3)) * 255).astype(np.uint8)


def _data_url(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    PIL.fromarray(image).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _ask(text: str, *images: np.ndarray) -> list[dict[str, Any]]:
    """OpenAI's content parts: the images, then the text."""
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": _data_url(i)}} for i in images
    ]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def _transformers(built: tuple[pathlib.Path, Any, Any], text: str, *images: np.ndarray) -> str:
    """transformers' greedy answer for the same images and chat prompt."""
    _, model, processor = built
    content = [*({"type": "image"} for _ in images), {"type": "text", "text": text}]
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True
    )
    inputs = processor(
        images=[list(images)], text=[prompt], return_tensors="pt", add_special_tokens=False
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=_NEW, do_sample=False)
    width = inputs["input_ids"].shape[1]
    return str(processor.decode(out[0, width:], skip_special_tokens=True))


def test_an_image_gets_transformers_greedy_answer(
    server: Server, built: tuple[pathlib.Path, Any, Any]
) -> None:
    image = _image(44, 36)
    answer = client(server).chat.completions.create(
        model=NAME, messages=_ask("kalo kami", image), max_tokens=_NEW, temperature=0
    )
    expected = _transformers(built, "kalo kami", image)
    assert answer.choices[0].message.content == expected
    pipe = hf.pipeline("image-text-to-text", built[0])
    assert pipe(image, "kalo kami", max_new_tokens=_NEW) == expected
    assert answer.usage.prompt_tokens > 25  # the image's 25 tokens are in the prompt


def test_a_streamed_image_answer_equals_the_whole_one(
    server: Server, built: tuple[pathlib.Path, Any, Any]
) -> None:
    image = _image(30, 50, seed=3)
    messages = _ask("mika", image)
    whole = client(server).chat.completions.create(
        model=NAME, messages=messages, max_tokens=_NEW, temperature=0
    )
    chunks = list(
        client(server).chat.completions.create(
            model=NAME, messages=messages, max_tokens=_NEW, temperature=0, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content == _transformers(built, "mika", image)
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_qwen2_vl_grids_and_positions_come_from_the_image(
    tmp_path: pathlib.Path,
) -> None:
    """Qwen2-VL: flat patches, the image's grid, M-RoPE positions (another vision path)."""
    qwen = _build(tmp_path, "qwen2_vl")
    image = _image(40, 52, seed=5)
    with running(qwen[0]) as started:
        answer = client(started).chat.completions.create(
            model="qwen2_vl", messages=_ask("kalo", image), max_tokens=_NEW, temperature=0
        )
    assert answer.choices[0].message.content == _transformers(qwen, "kalo", image)


def test_two_images_in_one_message(server: Server, built: tuple[pathlib.Path, Any, Any]) -> None:
    images = _image(40, 40, seed=1), _image(33, 47, seed=2)
    answer = client(server).chat.completions.create(
        model=NAME, messages=_ask("kalo", *images), max_tokens=_NEW, temperature=0
    )
    assert answer.choices[0].message.content == _transformers(built, "kalo", *images)


def test_a_text_only_chat_is_answered_too(
    server: Server, built: tuple[pathlib.Path, Any, Any]
) -> None:
    messages = [{"role": "user", "content": "kalo kami"}]
    answer = client(server).chat.completions.create(
        model=NAME, messages=messages, max_tokens=_NEW, temperature=0
    )
    model = hf.OrtModelForImageTextToText.from_pretrained(built[0])
    assert answer.choices[0].message.content == model.generate_text(
        messages, max_new_tokens=_NEW, temperature=None
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://example.com/cat.png", "does not fetch"),
        ("data:image/png;base64,@@not-base64@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"plain text").decode(), "not an image"),
        ("cat.png", "data URL"),
    ],
    ids=["http", "bad-base64", "not-an-image", "a-path"],
)
def test_a_bad_image_url_is_a_400_naming_the_part(server: Server, url: str, says: str) -> None:
    part = {"type": "image_url", "image_url": {"url": url}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "kalo"}, part]}]
    with pytest.raises(openai.BadRequestError) as caught:
        client(server).chat.completions.create(model=NAME, messages=messages, max_tokens=2)
    error = caught.value.body
    assert error["param"] == "messages[0].content[1].image_url.url", error
    assert says in error["message"] and "data:image/png;base64," in error["message"]


def test_a_full_queue_is_429_and_a_client_that_leaves_frees_the_worker(
    built: tuple[pathlib.Path, Any, Any],
) -> None:
    with running(built[0], "--max-waiting", "0") as small:
        busy = client(small).chat.completions.create(
            model=NAME,
            messages=_ask("kalo", _image(30, 30)),
            max_tokens=900,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        next(iter(busy))  # decoding: the one place is taken
        with pytest.raises(openai.RateLimitError) as caught:
            client(small).chat.completions.create(
                model=NAME, messages=_ask("kalo", _image(30, 30)), max_tokens=2
            )
        assert caught.value.body["code"] == "queue_full"
        assert int(caught.value.response.headers["Retry-After"]) >= 1
        busy.close()
        deadline = time.monotonic() + 30
        while (load := health(small))["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert load["active"] == 0 and load["cancelled"] == 1, load
        answer = client(small).chat.completions.create(
            model=NAME, messages=_ask("kalo", _image(30, 30)), max_tokens=2
        )
        assert answer.choices[0].finish_reason in ("length", "stop")
