"""The errors an OpenAI-compatible endpoint answers with, as OpenAI writes them."""

from __future__ import annotations

from typing import Any

from onnx_export.serving._errors import ServingError

__all__ = ["APIError", "Overloaded", "ServerClosing"]


class APIError(ServingError):
    """A request the server refuses: an HTTP status and OpenAI's error body.

    Attributes:
        status: The HTTP status (400 for a bad field, 404 for an unknown model, ...).
        message: What was wrong and what to send instead.
        type: OpenAI's error type (``invalid_request_error``, ...).
        param: The request field at fault, ``None`` when none is.
        code: A short machine-readable code, ``None`` when there is none.
    """

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class Overloaded(APIError):
    """Every batch slot is taken and the waiting queue is full: retry after a while."""

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message, status=429, type="rate_limit_error", code="queue_full")
        self.retry_after = retry_after


class ServerClosing(APIError):
    """The server is draining its requests before it stops: send elsewhere or later."""

    def __init__(self) -> None:
        super().__init__(
            "The server is shutting down: it finishes the requests it has and takes no new "
            "one. Retry against another replica.",
            status=503,
            type="server_error",
            code="shutting_down",
        )
        self.retry_after = 5
