"""Tiered-storage deleters, chosen by the offload driver name a ledger was written with.

Protocol code talks to :class:`offloaders.interface.Offloader` only and gets one
from :func:`offloaders.registry.offloader_for`; boto3 and the filesystem layout
stay behind that boundary.
"""

from offloaders.interface import (
    IndexFacts,
    IndexKind,
    IndexRef,
    IndexState,
    ObjectDeleteOutcome,
    Offloader,
    OffloadError,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    SegmentRef,
    java_uuid,
)
from offloaders.registry import OffloaderSettings, offloader_for

__all__ = [
    "IndexFacts",
    "IndexKind",
    "IndexRef",
    "IndexState",
    "ObjectDeleteOutcome",
    "OffloadError",
    "OffloadNotAllowedError",
    "OffloadTarget",
    "OffloadTargetError",
    "OffloadTransientError",
    "Offloader",
    "OffloaderSettings",
    "SegmentRef",
    "java_uuid",
    "offloader_for",
]
