"""Small CLI and serving edges (issue #38, item 5), each on a real exported folder.

- ``onnx-export generate --image PATH`` on an image-text-to-text folder gives the
  pipeline's text; without ``--image`` it exits 2 saying so; ``--image`` on a text folder
  exits 2.
- ``--num-beams 2 --prompt-lookup 2`` is a usage error: exit 2, not 1.
- ``onnx-export triton`` on a LLaVA folder serves its vision encoder and token embedding,
  says the decoder is not served, and names no ``genai_config.json`` the folder lacks.
- The demo's SARIF notes have level ``note`` (sarif-tools counted ``none: 25``).
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
from typing import Any

import numpy as np
import pytest

from onnx_export import hf
from onnx_export.cli import main
from tests.hf.vlm_checkpoints import VLM_CASES

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
PIL = pytest.importorskip("PIL.Image")


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("llava")
    VLM_CASES["llava"].save(root / "checkpoint")
    hf.export_pretrained(root / "checkpoint", root / "onnx")
    return root / "onnx"


def _png(folder: pathlib.Path, name: str, shape: tuple[int, int], seed: int) -> pathlib.Path:
    pixels = (np.random.default_rng(seed).random((*shape, 3)) * 255).astype(np.uint8)
    path = folder / name
    PIL.fromarray(pixels).save(path)
    return path


def test_generate_with_an_image_gives_the_pipelines_text(
    llava: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    image = _png(tmp_path, "cat.png", (44, 36), 1)
    pipe = hf.pipeline("image-text-to-text", llava)
    with PIL.open(image) as opened:
        expected = pipe(opened.convert("RGB"), "kalo kami", max_new_tokens=6)
    code, out, err = _cli(
        ["generate", str(llava), "kalo kami", "--image", str(image), "--max-new-tokens", "6"]
    )
    assert code == 0, err
    assert out == expected + "\n"
    code, out, err = _cli(
        [
            "generate",
            str(llava),
            "kalo",
            "--image",
            str(image),
            "--max-new-tokens",
            "6",
            "--num-beams",
            "2",
        ]
    )
    assert code == 0, err
    assert out == pipe(PIL.open(image).convert("RGB"), "kalo", max_new_tokens=6, num_beams=2) + "\n"


def test_two_images_go_in_order(llava: pathlib.Path, tmp_path: pathlib.Path) -> None:
    first, second = _png(tmp_path, "a.png", (30, 40), 2), _png(tmp_path, "b.png", (50, 30), 3)
    pipe = hf.pipeline("image-text-to-text", llava)
    images = [PIL.open(p).convert("RGB") for p in (first, second)]
    expected = pipe(images, "kalo", max_new_tokens=5)
    code, out, err = _cli(
        [
            "generate",
            str(llava),
            "kalo",
            "--image",
            str(first),
            "--image",
            str(second),
            "--max-new-tokens",
            "5",
        ]
    )
    assert (code, out) == (0, expected + "\n"), err


def test_an_image_text_folder_without_image_exits_2(llava: pathlib.Path) -> None:
    code, _, err = _cli(["generate", str(llava), "kalo kami"])
    assert code == 2
    assert "--image PATH" in err and "takes no text" not in err


def test_options_the_pipeline_does_not_take_exit_2(
    llava: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    image = _png(tmp_path, "x.png", (20, 20), 4)
    code, _, err = _cli(["generate", str(llava), "k", "--image", str(image), "--stream"])
    assert code == 2 and "--stream" in err


def test_an_unreadable_image_exits_2(llava: pathlib.Path, tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "not-an-image.png"
    bad.write_text("hello")
    code, _, err = _cli(["generate", str(llava), "kalo", "--image", str(bad)])
    assert code == 2 and "not-an-image.png" in err


def test_an_image_for_a_text_folder_exits_2(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "text"
    folder.mkdir()
    (folder / "onnx_export.json").write_text(json.dumps({"task": "text-generation"}))
    code, _, err = _cli(["generate", str(folder), "hi", "--image", str(tmp_path / "x.png")])
    assert code == 2 and "takes no images" in err


@pytest.mark.parametrize(
    "options",
    [["--num-beams", "2", "--prompt-lookup", "2"], ["--do-sample", "--prompt-lookup", "3"]],
    ids=["beams", "sampling"],
)
def test_prompt_lookup_with_beams_or_sampling_is_a_usage_error(
    tmp_path: pathlib.Path, options: list[str]
) -> None:
    code, _, err = _cli(["generate", str(tmp_path), "hi", *options])
    assert code == 2
    assert "--prompt-lookup" in err and "greedily" in err


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--quantize-block-size", "64"], "--quantize-block-size sets int4 quantization"),
        (["--quantize", "int8", "--no-quantize-head"], "the command has --quantize int8"),
    ],
    ids=["no-quantize", "int8"],
)
def test_int4_options_without_int4_are_a_usage_error(
    tmp_path: pathlib.Path, options: list[str], words: str
) -> None:
    """They were ignored without a word (a block size of 7 too)."""
    code, _, err = _cli(["hf", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out"), *options])
    assert code == 2
    assert words in err and "add --quantize int4" in err, err


def test_stream_with_beams_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    """The CLI's --stream, refused at once (was: exit 1 naming the Python ``streamer``)."""
    code, _, err = _cli(["generate", str(tmp_path), "hi", "--stream", "--num-beams", "2"])
    assert code == 2
    assert "--stream" in err and "--num-beams 2" in err and "streamer" not in err


def test_triton_serves_what_a_llava_folder_can_serve(
    llava: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    assert not (llava / "genai_config.json").exists()
    code, out, err = _cli(["triton", str(llava), "-o", str(tmp_path / "repo"), "--name", "llava"])
    assert code == 0, err
    assert (tmp_path / "repo" / "llava_vision_encoder" / "config.pbtxt").is_file()
    assert (tmp_path / "repo" / "llava_embed_tokens" / "config.pbtxt").is_file()
    assert not (tmp_path / "repo" / "llava_decoder_model").exists()
    assert "not served: decoder_model.onnx" in out
    assert "genai_config.json" not in out + err


def test_triton_on_a_decoder_alone_names_no_missing_genai_config(
    llava: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    code, _, err = _cli(["triton", str(llava / "decoder_model.onnx"), "-o", str(tmp_path / "r")])
    assert code == 2
    assert "key/value cache" in err and "genai_config.json" not in err


def test_demo_notes_have_level_note(tmp_path: pathlib.Path, monkeypatch: Any) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(["demo"])
    assert code == 0, err
    results = json.loads((tmp_path / "m.sarif").read_text())["runs"][0]["results"]
    levels = {r["level"] for r in results}
    assert "note" in levels and "none" not in levels, levels
    for result in results:
        assert result.get("kind", "fail") == "fail" or result["level"] == "none"
