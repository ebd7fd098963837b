"""The offload lane: requests for tiered-storage copies verified and deleted on their own threads
(:mod:`.lane`), with the process's one pool for their storage calls (:mod:`.pool`), so a slow
object store never holds the BookKeeper requests back.
"""
