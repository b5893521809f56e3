"""Writes locations, stacks and code flows, registering every file in ``run.artifacts``."""

from __future__ import annotations

import os

from .._locations import Location, Stack
from .._model import ExceptionInfo
from ._types import (
    ArtifactDict,
    ArtifactLocationDict,
    CodeFlowDict,
    LocationDict,
    RegionDict,
    StackDict,
)
from ._uris import UriMapper

__all__ = ["LocationWriter"]


class LocationWriter:
    """Builds SARIF location objects for one run and remembers the artifacts they reference.

    Artifacts are numbered in order of first reference, so the output is deterministic.
    """

    def __init__(self, source_root: str | os.PathLike[str] | None) -> None:
        self.uris = UriMapper(source_root)
        self._artifacts: dict[tuple[str, str | None], int] = {}
        self._artifact_list: list[ArtifactDict] = []

    @property
    def artifacts(self) -> list[ArtifactDict]:
        """The artifacts referenced so far, in index order."""
        return list(self._artifact_list)

    def location(
        self, location: Location, *, location_id: int | None = None, default_message: bool = False
    ) -> LocationDict:
        """Returns a SARIF ``location``; ``default_message`` gives it a message even if unset."""
        result: LocationDict = {}
        if location_id is not None:
            result["id"] = location_id
        if location.uri:
            result["physicalLocation"] = {"artifactLocation": self._artifact_location(location)}
            region = _region(location)
            if region:
                result["physicalLocation"]["region"] = region
        if location.function:
            result["logicalLocations"] = [{"name": location.function, "kind": "function"}]
        message = location.message
        if message is None and default_message:
            message = _describe(location)
        if message is not None:
            result["message"] = {"text": message}
        return result

    def stack(self, stack: Stack) -> StackDict:
        """Returns a SARIF ``stack``; frames are reversed to SARIF's innermost-first order."""
        result: StackDict = {
            "frames": [{"location": self.location(frame)} for frame in reversed(stack.frames)]
        }
        if stack.message is not None:
            result["message"] = {"text": stack.message}
        return result

    def exception_stacks(self, info: ExceptionInfo) -> list[StackDict]:
        """Returns one stack per exception in the chain that has a traceback."""
        stacks: list[StackDict] = []
        current: ExceptionInfo | None = info
        prefix = ""
        while current is not None:
            if current.stack is not None:
                stacks.append(self.stack(Stack(current.stack.frames, f"{prefix}{current}")))
            current = current.cause
            prefix = "Caused by "
        return stacks

    def code_flow(self, steps: tuple[Location, ...]) -> CodeFlowDict:
        """Returns a SARIF ``codeFlow`` with one thread flow through ``steps``."""
        return {"threadFlows": [{"locations": [{"location": self.location(s)} for s in steps]}]}

    def _artifact_location(self, location: Location) -> ArtifactLocationDict:
        artifact_location = self.uris.artifact_location(location.uri)
        key = (artifact_location["uri"], artifact_location.get("uriBaseId"))
        index = self._artifacts.get(key)
        if index is None:
            index = len(self._artifact_list)
            self._artifacts[key] = index
            self._artifact_list.append({"location": _copy(artifact_location)})
        artifact_location["index"] = index
        return artifact_location


def _describe(location: Location) -> str:
    """A short default message: the function, else the file name and line."""
    if location.function:
        return f"In {location.function}"
    name = location.uri.replace("\\", "/").rsplit("/", 1)[-1] or "<unknown>"
    return f"{name}:{location.line}" if location.line else name


def _copy(artifact_location: ArtifactLocationDict) -> ArtifactLocationDict:
    copy: ArtifactLocationDict = {"uri": artifact_location["uri"]}
    if "uriBaseId" in artifact_location:
        copy["uriBaseId"] = artifact_location["uriBaseId"]
    return copy


def _region(location: Location) -> RegionDict:
    """The region of a location; empty when the line is unknown (SARIF needs a startLine)."""
    region: RegionDict = {}
    if location.line is None or location.line < 1:
        return region
    region["startLine"] = location.line
    if location.column is not None and location.column >= 1:
        region["startColumn"] = location.column
    if location.snippet:
        region["snippet"] = {"text": location.snippet}
    return region
