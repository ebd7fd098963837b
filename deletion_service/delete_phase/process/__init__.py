"""The delete process: BookKeeper requests gathered, decided and deleted in a child process of the
daemon (:mod:`.child`) while the worker records and acknowledges the batch before; the daemon's
side of it (:mod:`.lane`) and whether to run one at all (:mod:`.choice`).
"""
