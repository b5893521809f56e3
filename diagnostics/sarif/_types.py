"""The subset of the SARIF 2.1.0 object model this package writes, as typed dicts.

Names and nesting follow the OASIS specification; keys that are not always written
are ``NotRequired``. Only the writer builds these; readers treat logs as plain JSON.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "ArtifactContent",
    "ArtifactDict",
    "ArtifactLocationDict",
    "CodeFlowDict",
    "ConfigurationDict",
    "ExceptionDict",
    "InvocationDict",
    "LocationDict",
    "LogicalLocationDict",
    "MessageDict",
    "MultiformatMessageString",
    "NotificationDict",
    "PhysicalLocationDict",
    "RegionDict",
    "ReportingDescriptorDict",
    "ResultDict",
    "RunDict",
    "SarifLogDict",
    "StackDict",
    "StackFrameDict",
    "ThreadFlowDict",
    "ThreadFlowLocationDict",
    "ToolComponentDict",
    "ToolDict",
]

SarifLevel = Literal["none", "note", "warning", "error"]
ResultKind = Literal["notApplicable", "pass", "fail", "review", "open", "informational"]


class MessageDict(TypedDict):
    """SARIF ``message``."""

    text: str
    markdown: NotRequired[str]


class MultiformatMessageString(TypedDict):
    """SARIF ``multiformatMessageString``."""

    text: str
    markdown: NotRequired[str]


class ArtifactLocationDict(TypedDict):
    """SARIF ``artifactLocation``."""

    uri: str
    uriBaseId: NotRequired[str]
    index: NotRequired[int]


class ArtifactContent(TypedDict):
    """SARIF ``artifactContent`` (only its text is written, as a region snippet)."""

    text: str


class RegionDict(TypedDict, total=False):
    """SARIF ``region``."""

    startLine: int
    startColumn: int
    snippet: ArtifactContent


class PhysicalLocationDict(TypedDict):
    """SARIF ``physicalLocation``."""

    artifactLocation: ArtifactLocationDict
    region: NotRequired[RegionDict]


class LogicalLocationDict(TypedDict):
    """SARIF ``logicalLocation``."""

    name: str
    kind: str


class LocationDict(TypedDict, total=False):
    """SARIF ``location``."""

    id: int
    physicalLocation: PhysicalLocationDict
    logicalLocations: list[LogicalLocationDict]
    message: MessageDict


class StackFrameDict(TypedDict):
    """SARIF ``stackFrame``."""

    location: LocationDict


class StackDict(TypedDict):
    """SARIF ``stack``."""

    frames: list[StackFrameDict]
    message: NotRequired[MessageDict]


class ThreadFlowLocationDict(TypedDict):
    """SARIF ``threadFlowLocation``."""

    location: LocationDict


class ThreadFlowDict(TypedDict):
    """SARIF ``threadFlow``."""

    locations: list[ThreadFlowLocationDict]


class CodeFlowDict(TypedDict):
    """SARIF ``codeFlow``."""

    threadFlows: list[ThreadFlowDict]


class ResultDict(TypedDict):
    """SARIF ``result``."""

    ruleId: str
    ruleIndex: int
    kind: ResultKind
    level: SarifLevel
    message: MessageDict
    locations: NotRequired[list[LocationDict]]
    relatedLocations: NotRequired[list[LocationDict]]
    stacks: NotRequired[list[StackDict]]
    codeFlows: NotRequired[list[CodeFlowDict]]
    properties: NotRequired[dict[str, object]]


class ConfigurationDict(TypedDict):
    """SARIF ``reportingConfiguration``."""

    level: SarifLevel


class ReportingDescriptorDict(TypedDict):
    """SARIF ``reportingDescriptor`` (a rule)."""

    id: str
    name: str
    shortDescription: MultiformatMessageString
    fullDescription: MultiformatMessageString
    messageStrings: dict[str, MultiformatMessageString]
    helpUri: str
    defaultConfiguration: ConfigurationDict


class ToolComponentDict(TypedDict):
    """SARIF ``toolComponent`` (the driver)."""

    name: str
    version: str
    informationUri: str
    rules: list[ReportingDescriptorDict]


class ToolDict(TypedDict):
    """SARIF ``tool``."""

    driver: ToolComponentDict


class ExceptionDict(TypedDict):
    """SARIF ``exception``."""

    kind: str
    message: str
    stack: NotRequired[StackDict]
    innerExceptions: NotRequired[list[ExceptionDict]]


class NotificationDict(TypedDict):
    """SARIF ``notification``."""

    level: SarifLevel
    message: MessageDict
    timeUtc: NotRequired[str]
    exception: NotRequired[ExceptionDict]


class InvocationDict(TypedDict):
    """SARIF ``invocation``."""

    executionSuccessful: bool
    startTimeUtc: str
    endTimeUtc: NotRequired[str]
    toolExecutionNotifications: NotRequired[list[NotificationDict]]


class ArtifactDict(TypedDict):
    """SARIF ``artifact``."""

    location: ArtifactLocationDict


class RunDict(TypedDict):
    """SARIF ``run``."""

    tool: ToolDict
    invocations: list[InvocationDict]
    originalUriBaseIds: NotRequired[dict[str, ArtifactLocationDict]]
    artifacts: NotRequired[list[ArtifactDict]]
    results: list[ResultDict]
    columnKind: Literal["utf16CodeUnits", "unicodeCodePoints"]


SarifLogDict = TypedDict("SarifLogDict", {"$schema": str, "version": str, "runs": list[RunDict]})
"""SARIF ``sarifLog``: the whole file."""
