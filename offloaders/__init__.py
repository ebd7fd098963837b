"""Tiered-storage deleters, chosen by the offload driver name a ledger was written with.

Protocol code talks to :class:`offloaders.interface.Offloader` only and gets one
from :func:`offloaders.registry.offloader_for`; boto3 and the filesystem layout
stay behind that boundary.
"""

from offloaders.interface import (
    DeleteOutcome,
    IndexCheck,
    IndexExpectation,
    Offloader,
    OffloadError,
    OffloadIndexMismatchError,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    SegmentRef,
    Verification,
    java_uuid,
)
from offloaders.registry import OffloaderSettings, offloader_for

__all__ = [
    "DeleteOutcome",
    "IndexCheck",
    "IndexExpectation",
    "OffloadError",
    "OffloadIndexMismatchError",
    "OffloadNotAllowedError",
    "OffloadTarget",
    "OffloadTargetError",
    "OffloadTransientError",
    "Offloader",
    "OffloaderSettings",
    "SegmentRef",
    "Verification",
    "java_uuid",
    "offloader_for",
]
