"""The metadata keys and values Pulsar stamps on what it writes, spelled once.

Whose ledger (or offloaded object) is it?  Pulsar says so in metadata it
writes at creation, and the delete phase refuses anything whose metadata does
not name the request's topic, cursor or schema.  A key misspelt in one module
would make every ledger look foreign (nothing deleted) or, worse, make a check
silently compare nothing; so every module reads the spelling from here.

BookKeeper custom metadata (``LedgerMetadataFormat.customMetadata``), written by
``LedgerMetadataUtils`` in Pulsar's ``managed-ledger`` module:

* ``buildBaseManagedLedgerMetadata(name)``, on every data and cursor ledger
  ``ManagedLedgerImpl``/``ManagedCursorImpl`` create: :data:`APPLICATION_KEY` =
  :data:`APPLICATION_PULSAR`, :data:`COMPONENT_KEY` =
  :data:`COMPONENT_MANAGED_LEDGER`, :data:`MANAGED_LEDGER_KEY` = the managed
  ledger name (``tenant/ns/persistent/<encoded topic>``);
* ``buildAdditionalMetadataForCursor(name)``, added on a cursor's ledger:
  :data:`CURSOR_KEY` = the cursor name;
* ``buildMetadataForSchema(schemaId)``, on the ledgers
  ``BookkeeperSchemaStorage`` creates: :data:`APPLICATION_KEY`,
  :data:`COMPONENT_KEY` = :data:`COMPONENT_SCHEMA`, :data:`SCHEMA_ID_KEY` = the
  schema id (``tenant/ns/<encoded base topic>``).

Tiered-storage object metadata:

* ``ManagedLedgerImpl`` passes :data:`MANAGED_LEDGER_NAME_FIELD` as extra
  metadata to every offload and adds it to the driver metadata of every
  ``deleteOffloaded``; the blob-store offloader (``tiered-storage/jcloud``) writes
  it as user metadata, which jclouds lower-cases: :data:`OBJECT_ML_NAME_KEY`.
  The filesystem offloader uses it as the directory the ledger is written under;
* ``DataBlockUtils.addVersionInfo`` (``tiered-storage/jcloud``) stamps every
  object with :data:`FORMAT_VERSION_KEY` (lower-cased by jclouds) =
  :data:`CURRENT_FORMAT_VERSION`, and upstream reads no other version.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- BookKeeper custom metadata

#: Every ledger Pulsar creates: which application owns it.
APPLICATION_KEY = "application"
APPLICATION_PULSAR = "pulsar"

#: Which part of Pulsar created the ledger.
COMPONENT_KEY = "component"
#: Data ledgers and cursor ledgers of a managed ledger.
COMPONENT_MANAGED_LEDGER = "managed-ledger"
#: Ledgers of the schema registry.
COMPONENT_SCHEMA = "schema"
#: A compacted topic's ledger (``LedgerMetadataUtils.buildMetadataForCompactedLedger``).
COMPONENT_COMPACTED_LEDGER = "compacted-ledger"
#: A delayed-delivery bucket's snapshot ledger (PIP-195), with :data:`MANAGED_LEDGER_KEY` and :data:`CURSOR_KEY`.
COMPONENT_DELAYED_INDEX_BUCKET = "delayed-index-bucket"

#: The managed ledger a data or cursor ledger belongs to.
MANAGED_LEDGER_KEY = "pulsar/managed-ledger"
#: Present on a cursor's ledger only: the cursor's name.
CURSOR_KEY = "pulsar/cursor"
#: The schema a schema ledger belongs to.
SCHEMA_ID_KEY = "pulsar/schemaId"
#: The topic a compacted ledger belongs to (the ledger is referenced only from cursor-ledger entries).
COMPACTED_TOPIC_KEY = "pulsar/compactedTopic"

# --------------------------------------------------------------------------- tiered-storage object metadata

#: The managed ledger an offload belongs to, as upstream's extra/driver metadata spells it.
MANAGED_LEDGER_NAME_FIELD = "ManagedLedgerName"
#: The same, as user metadata on an offloaded object (jclouds lower-cases keys).
OBJECT_ML_NAME_KEY = "managedledgername"

#: Upstream's ``DataBlockUtils.METADATA_FORMAT_VERSION_KEY``, lower-cased by jclouds.
FORMAT_VERSION_KEY = "s3managedledgeroffloaderformatversion"
#: The only object format version upstream writes and reads.
CURRENT_FORMAT_VERSION = "1"
