"""Maps the ``uri`` of a :class:`Location` to a SARIF ``artifactLocation``."""

from __future__ import annotations

import os
import pathlib
import re
import urllib.parse
import urllib.request

from ._types import ArtifactLocationDict

__all__ = ["SRCROOT", "UriMapper"]

SRCROOT = "SRCROOT"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class UriMapper:
    """Turns paths and URIs into artifact locations, relative to ``SRCROOT`` where possible.

    Paths under ``source_root`` become relative URIs with ``uriBaseId`` ``SRCROOT``; other
    paths become absolute ``file://`` URIs; URIs stay as they are (``file://`` URIs under
    the root are made relative too); pseudo file names such as ``<eval_with_key>.3`` become
    percent-encoded relative references with no base.
    """

    def __init__(self, source_root: str | os.PathLike[str] | None) -> None:
        self._root = os.path.abspath(os.fspath(source_root)) if source_root is not None else None
        self.used_root = False

    def original_uri_base_ids(self) -> dict[str, ArtifactLocationDict]:
        """The ``originalUriBaseIds`` entry declaring ``SRCROOT`` (empty if it was not used)."""
        if self._root is None or not self.used_root:
            return {}
        root_uri = pathlib.Path(self._root).as_uri()
        if not root_uri.endswith("/"):
            root_uri += "/"
        return {SRCROOT: {"uri": root_uri}}

    def artifact_location(self, uri: str) -> ArtifactLocationDict:
        """Returns the artifact location (without ``index``) for a location's ``uri``."""
        if _SCHEME.match(uri) and not _WINDOWS_DRIVE.match(uri):
            if not uri.lower().startswith("file:"):
                return {"uri": uri}
            path = urllib.request.url2pathname(urllib.parse.urlsplit(uri).path)
            relative = self._relative_to_root(path)
            return relative if relative is not None else {"uri": uri}
        if uri.startswith("<"):
            return {"uri": urllib.parse.quote(uri, safe="")}
        path = os.path.abspath(uri)
        relative = self._relative_to_root(path)
        if relative is not None:
            return relative
        return {"uri": pathlib.Path(path).as_uri()}

    def _relative_to_root(self, path: str) -> ArtifactLocationDict | None:
        if self._root is None or not os.path.isabs(path):
            return None
        path = os.path.normpath(path)
        try:
            inside = os.path.commonpath([self._root, path]) == self._root
        except ValueError:  # different drives on Windows
            return None
        if not inside or path == self._root:
            return None
        self.used_root = True
        relative = pathlib.PurePath(os.path.relpath(path, self._root)).as_posix()
        return {"uri": urllib.parse.quote(relative), "uriBaseId": SRCROOT}
