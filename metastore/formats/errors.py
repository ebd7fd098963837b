"""The one error type of the format library.

A ``ValueError`` subclass, so callers that treat "this node is not what I can
read" like any bad value keep working, while code that must never guess (the
deleter: a node it cannot read is a node it must not act on) can catch exactly
this.
"""


class FormatError(ValueError):
    """Bytes or text that are not a valid Pulsar/BookKeeper metadata encoding."""
