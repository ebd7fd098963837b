"""The data dir's locks are real ``flock`` locks on files: a Ctrl-C at any moment leaves them free.

The interrupt is injected (a ``KeyboardInterrupt`` raised where the lock was taken but not yet
recorded as ours): the real one lands there only by chance, as it did under load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deletion_service.embedded.lock import DataDirLock


class _InterruptedOnce:
    """``os.ftruncate`` for the first call raises KeyboardInterrupt, as a Ctrl-C landing right after the
    ``flock`` was taken; later calls do the real thing."""

    def __init__(self, real) -> None:  # noqa: ANN001
        self.real = real
        self.raised = False

    def __call__(self, fd: int, size: int) -> None:
        if not self.raised:
            self.raised = True
            raise KeyboardInterrupt
        self.real(fd, size)


@pytest.mark.parametrize("take", ["hold", "acquire"])
def test_a_ctrl_c_while_taking_the_lock_leaves_it_free(tmp_path: Path, take: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import deletion_service.embedded.lock as lock_module

    lock = DataDirLock(tmp_path / "broker.lock")
    interrupt = _InterruptedOnce(lock_module.os.ftruncate)
    monkeypatch.setattr(lock_module.os, "ftruncate", interrupt)
    with pytest.raises(KeyboardInterrupt):
        if take == "hold":
            with lock.hold():
                pytest.fail("the body ran although taking the lock was interrupted")
        else:
            lock.acquire("a test")
    assert interrupt.raised
    assert DataDirLock(tmp_path / "broker.lock").held_elsewhere() is None, "the interrupted take kept the lock"
    with lock.hold():  # the same object takes it again at once (the broker's stop on the way out)
        assert DataDirLock(tmp_path / "broker.lock").held_elsewhere() is not None


def test_hold_releases_after_its_body_and_excludes_others_during_it(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path / "broker.lock")
    other = DataDirLock(tmp_path / "broker.lock")
    with lock.hold():
        assert other.held_elsewhere() is not None
    assert other.held_elsewhere() is None
