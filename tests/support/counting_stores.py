"""Metadata store wrappers for in-process fault injection: one counts the calls that write, one also
fails every read once (as while a store reconnects)."""

from __future__ import annotations

from collections.abc import Sequence

from metastore import MetadataStore, MetadataStoreUnavailable
from metastore.interface import Op


class CountingStore(MetadataStore):
    """Wraps a real store and counts the calls that write."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.writes: list[str] = []

    def get(self, path: str):  # noqa: ANN201
        return self.inner.get(path)

    def get_many(self, paths):  # noqa: ANN001, ANN201
        return self.inner.get_many(paths)

    def children(self, path: str) -> list[str]:
        return self.inner.children(path)

    def put(self, path: str, data: bytes, expected_version: int) -> int:
        self.writes.append(f"put {path}")
        return self.inner.put(path, data, expected_version)

    def delete(self, path: str, expected_version: int) -> None:
        self.writes.append(f"delete {path}")
        self.inner.delete(path, expected_version)

    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        self.writes.append(f"multi of {len(ops)}")
        return self.inner.multi(ops)

    def close(self) -> None:
        self.inner.close()


class FlakyReads(CountingStore):
    """Fault injection, in-process: every read fails once with ``MetadataStoreUnavailable``, as
    while a store reconnects, and answers when asked again (``down``: never answers).
    ``dropped`` counts the injected failures; writes pass through and are counted as usual."""

    def __init__(self, inner: MetadataStore, down: bool = False) -> None:
        super().__init__(inner)
        self.down = down
        self.dropped = 0
        self._owed: set[tuple[str, object]] = set()  # reads that failed once: they answer next time

    def _drop_once(self, read: str, arg: object) -> None:
        if self.down or (read, arg) not in self._owed:
            self._owed.add((read, arg))
            self.dropped += 1
            raise MetadataStoreUnavailable(f"injected fault: {read} {arg} while reconnecting")
        self._owed.discard((read, arg))

    def get(self, path: str):  # noqa: ANN201
        self._drop_once("get", path)
        return super().get(path)

    def get_many(self, paths):  # noqa: ANN001, ANN201
        paths = list(paths)
        self._drop_once("get_many", tuple(paths))
        return super().get_many(paths)

    def children(self, path: str) -> list[str]:
        self._drop_once("children", path)
        return super().children(path)
