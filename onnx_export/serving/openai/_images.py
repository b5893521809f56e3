"""Images of chat messages: OpenAI's ``image_url`` parts, read from data URLs only.

The server fetches nothing: an ``http(s)`` URL is refused with how to send the image
inline (``data:image/png;base64,...``). Bad base64, or bytes Pillow cannot read as an
image, are a 400 naming the part.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from ._errors import APIError

__all__ = ["MAX_IMAGE_BYTES", "decode_image"]

#: The largest image file a request may carry (decoded bytes).
MAX_IMAGE_BYTES = 20 * 1024 * 1024
_INLINE = (
    "send the image inline as a data URL: 'data:image/png;base64,' followed by the file's "
    "bytes in base64"
)


def decode_image(value: Any, param: str) -> Any:
    """The RGB ``PIL.Image`` of an ``image_url`` part's value (``{"url": ...}`` or the URL).

    Raises:
        APIError: 400 naming ``param`` (its ``.url``): not a data URL, not base64, not an
            image, or larger than :data:`MAX_IMAGE_BYTES`.
    """
    url = value.get("url") if isinstance(value, dict) else value
    where = f"{param}.url"
    if not isinstance(url, str) or not url:
        raise APIError(f"{where} must be a data URL: {_INLINE}.", param=where)
    if url.startswith(("http://", "https://")):
        raise APIError(
            f"{where} is an http(s) URL; this server does not fetch images: {_INLINE}.",
            param=where,
            code="image_url_not_supported",
        )
    header, comma, data = url.partition(",")
    if not header.startswith("data:") or not comma or not header.endswith(";base64"):
        raise APIError(
            f"{where} must be a base64 data URL ('data:<type>;base64,<data>'), got "
            f"{url[:40]!r}...: {_INLINE}.",
            param=where,
        )
    if len(data) * 3 // 4 > MAX_IMAGE_BYTES:
        raise APIError(
            f"{where} holds more than {MAX_IMAGE_BYTES // 2**20} MiB: send a smaller image.",
            param=where,
        )
    try:
        raw = base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise APIError(f"{where}'s data is not valid base64 ({e}): {_INLINE}.", param=where) from e
    return _open(raw, where)


def _open(raw: bytes, where: str) -> Any:
    try:
        from PIL import Image
    except ImportError as e:  # the folder's pipeline needs Pillow too: unlikely here
        raise APIError(
            "This server cannot read images: Pillow is missing (pip install pillow).",
            status=500,
            type="server_error",
        ) from e
    try:
        with Image.open(io.BytesIO(raw)) as image:
            return image.convert("RGB")
    except Image.DecompressionBombError as e:
        raise APIError(f"{where} is too large an image: {e}", param=where) from e
    except (OSError, ValueError) as e:  # UnidentifiedImageError, truncated files
        raise APIError(
            f"{where}'s data is not an image (PNG, JPEG, WebP, GIF...) Pillow can read: {_INLINE}.",
            param=where,
        ) from e
