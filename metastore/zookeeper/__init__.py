"""The ZooKeeper backend of the metadata store (the only place kazoo is imported): the store
(:mod:`.store`) on one connection (:mod:`.connection`), reads batched into multi-reads
(:mod:`.batch_reads`, framed by :mod:`.multiread`), and kazoo's errors as the store's
(:mod:`.kazoo_errors`).
"""
