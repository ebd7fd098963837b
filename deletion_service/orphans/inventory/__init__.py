"""The scan's three inventories, each a Spark job: BookKeeper's ledgers, Pulsar's references, stored objects.

Why Spark tasks do the reading: a cluster holds millions of ledger znodes and one
client reading them one round trip at a time takes hours.  So the work is split
where the storage splits it — BookKeeper's ledger layout into subtrees, Pulsar's
metadata into namespaces, a bucket into ranges of names — and every task opens
its OWN metadata-store client or offloader (clients do not survive pickling, and
one per task keeps tasks independent).  Tasks wait on I/O, not on cores, so each
one keeps its reads in flight: ``get_many`` (a ZooKeeper multi-read) in chunks, the next chunk
requested before the current one is decoded, cursor listings on a few threads;
Spark may run more task slots than cores.

What a task cannot read is said, never skipped silently:

* a ledger znode that does not decode is a row with ``error`` set (never a candidate);
* a managed-ledger, cursor or schema node that does not decode hides references,
  so the whole inventory fails with :class:`InventoryError` naming the node: an
  orphan list computed without it could name a live ledger;
* a storage location that cannot be listed is left out and reported as refused,
  with why (:class:`LocationPlan`): objects never listed are never candidates.

Each inventory is read once and kept (``persist`` + ``count``), so every later
step sees the same moment of the cluster and nothing re-reads ZooKeeper.

Location strings (the ``location`` column of OFFLOAD_REFERENCES and
OFFLOADED_OBJECTS) name where objects live, the same way on both sides:
``s3://<bucket>`` for the S3 family at the provider's default endpoint,
``s3://<bucket>?endpoint=<normalized endpoint>`` otherwise (``aws-s3``, ``S3`` and
``aliyun-oss`` are one family: one bucket written under two driver names is
still one place), ``filesystem://<resolved root>`` for the filesystem driver, and
``<driver>://<bucket>`` for a driver we do not implement (named, never listed).
"""

from deletion_service.orphans.inventory.common import InventoryError, StoreSpec, read_nodes
from deletion_service.orphans.inventory.ledgers import bk_ledgers, bk_row, ledger_subtrees
from deletion_service.orphans.inventory.locations import LocationPlan, ObjectLocation, OffloadScope, object_locations
from deletion_service.orphans.inventory.objects import offloaded_objects
from deletion_service.orphans.inventory.references import pulsar_references
from deletion_service.protocol.references import ReferenceKind  # the ``kind`` column of REFERENCES

__all__ = ["InventoryError", "LocationPlan", "ObjectLocation", "OffloadScope", "ReferenceKind", "StoreSpec",
           "bk_ledgers", "bk_row", "ledger_subtrees", "object_locations", "offloaded_objects", "pulsar_references",
           "read_nodes"]
