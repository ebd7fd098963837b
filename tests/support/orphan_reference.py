"""The orphan scan's rules in plain Python, to check the Spark reconciliation against.

Rows are dicts keyed by the columns of :mod:`deletion_service.orphans.schemas`; results are
sets of tuples in those columns' order.  Written for a reader to verify line by line, never
for speed, and sharing no code with :mod:`deletion_service.orphans.reconcile`: the topic
names are read with :mod:`metastore.formats.pulsar_paths` itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from deletion_service.orphans import schemas
from metastore.formats.pulsar_paths import TopicName, topic_from_managed_ledger_name, url_decode, url_encode

Row = dict
DAY_S = 86400
EDGES_S = (2 * DAY_S, 7 * DAY_S, 30 * DAY_S, 90 * DAY_S)
UNKNOWN = "(unknown)"


def columns(schema) -> list[str]:
    return [f.name for f in schema.fields]


def as_tuple(row: Row, schema) -> tuple:
    return tuple(row[name] for name in columns(schema))


@dataclass
class Inventory:
    bk_ledgers: list[Row]
    references: list[Row]
    offload_references: list[Row]
    topics: list[Row]
    offloaded_objects: list[Row]


@dataclass
class Expected:
    orphan_ledgers: set[tuple]
    missing_ledgers: set[tuple]
    orphan_objects: set[tuple]


# --------------------------------------------------------------------------- whose ledger


def _topic_or_none(make) -> TopicName | None:
    try:
        return make()
    except ValueError:
        return None


def _from_schema_id(schema_id: str) -> TopicName:
    parts = schema_id.split("/")
    if len(parts) != 3:
        raise ValueError(schema_id)
    local = url_decode(parts[2])
    if url_encode(local) != parts[2]:
        raise ValueError(schema_id)
    return TopicName(parts[0], parts[1], local)


def _from_full_name(name: str) -> TopicName:
    prefix = "persistent://"
    if not name.startswith(prefix):
        raise ValueError(name)
    parts = name[len(prefix):].split("/")
    if len(parts) != 3:
        raise ValueError(name)
    return TopicName(*parts)


def owner(ledger: Row) -> tuple[str | None, str | None, str | None]:
    """(topic, tenant, namespace) from the key the ledger's kind uses; Nones if not a valid name."""
    kind = ledger["kind"]
    if kind == "schema":
        value, parse = ledger["schemaId"], _from_schema_id
    elif kind == "compacted":
        value, parse = ledger["compactedTopic"], _from_full_name
    else:
        value, parse = ledger["managedLedger"], topic_from_managed_ledger_name
    topic = None if value is None else _topic_or_none(lambda: parse(value))
    if topic is None:
        return None, None, None
    return str(topic), topic.tenant, f"{topic.tenant}/{topic.namespace}"


# --------------------------------------------------------------------------- the three results


def reconcile(inv: Inventory, min_age_s: int, now_ms: int) -> Expected:
    cutoff = now_ms - min_age_s * 1000
    referenced = {r["ledgerId"] for r in inv.references}
    hiding = {t["topic"] for t in inv.topics if t["hidden"] is not None}
    present = {b["ledgerId"] for b in inv.bk_ledgers}
    orphans = set()
    for b in inv.bk_ledgers:
        if b["application"] != "pulsar" or b["state"] != "CLOSED" or b["error"] is not None:
            continue
        if b["ctimeMs"] is None or b["ctimeMs"] > cutoff:
            continue
        if b["ledgerId"] in referenced:
            continue
        kind = b["kind"] or "other"
        if kind == "compacted" and b["compactedTopic"] in hiding:
            continue  # its topic's compaction cursor keeps its state in a cursor ledger
        topic, tenant, namespace = owner({**b, "kind": kind})
        orphans.add((b["ledgerId"], topic, tenant, namespace, b["component"], b["cursor"], b["schemaId"],
                     b["ctimeMs"], b["length"] if b["length"] is not None else 0, kind))
    missing = set()
    for r in inv.references:
        if r["ledgerId"] in present:
            continue
        if r["kind"] == "ledger" and r["offloaded"] and r["bookkeeperDeleted"]:
            continue
        missing.add((r["ledgerId"], r["kind"], r["topic"], r["detail"]))
    named_uuids = {o["uuid"] for o in inv.offload_references}
    objects = {as_tuple({**o, "topic": object_topic(inv, o)}, schemas.ORPHAN_OBJECTS) for o in inv.offloaded_objects
               if o["uuid"] is not None and o["uuid"] not in named_uuids and o["lastModifiedMs"] <= cutoff}
    return Expected(orphans, missing, objects)


def _topic_of_ml(name: str | None) -> str | None:
    topic = None if name is None else _topic_or_none(lambda: topic_from_managed_ledger_name(name))
    return None if topic is None else str(topic)


def object_topic(inv: Inventory, o: Row) -> str | None:
    """Whose an orphan object is: the filesystem layout's managed-ledger directory, else the smallest
    topic listing its ledger, else its ledger's own BookKeeper metadata (a data ledger's)."""
    parts = o["name"].split("/")
    if o["location"].startswith("filesystem://") and len(parts) == 5:
        return _topic_of_ml("/".join(parts[:4]))
    if o["ledgerId"] is None:
        return None
    listing = sorted(r["topic"] for r in inv.references if r["kind"] == "ledger" and r["ledgerId"] == o["ledgerId"])
    if listing:
        return listing[0]
    own = [b["managedLedger"] for b in inv.bk_ledgers
           if b["ledgerId"] == o["ledgerId"] and b["kind"] == "data" and b["error"] is None]
    return _topic_of_ml(own[0]) if own else None


def by_kind(expected: Expected) -> dict[str, int]:
    counts = dict.fromkeys(("data", "cursor", "schema", "compacted", "delayed-bucket", "other"), 0)
    for o in expected.orphan_ledgers:
        counts[o[9]] += 1
    return counts


# --------------------------------------------------------------------------- the report's numbers


def histogram(orphans: set[tuple], min_age_s: int, now_ms: int) -> list[tuple[int, int | None, int, int]]:
    """(lower_s, upper_s, count, bytes) per bucket."""
    lowers = [min_age_s] + [e for e in EDGES_S if e > min_age_s]
    uppers = lowers[1:] + [None]
    out = []
    for i, (lo, hi) in enumerate(zip(lowers, uppers, strict=True)):
        members = [o for o in orphans
                   if (i == 0 or now_ms - o[7] >= lo * 1000) and (hi is None or now_ms - o[7] < hi * 1000)]
        out.append((lo, hi, len(members), sum(o[8] for o in members)))
    return out


def by_namespace(inv: Inventory, expected: Expected) -> dict[tuple[str, str], list[int]]:
    """(tenant, namespace) → [orphan ledgers, their bytes, orphan objects, their bytes]."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for o in expected.orphan_ledgers:
        key = (o[2] or UNKNOWN, o[3] or UNKNOWN)
        totals[key][0] += 1
        totals[key][1] += o[8]
    for obj in expected.orphan_objects:
        topic = obj[7]  # ORPHAN_OBJECTS.topic: object_topic's
        parsed = None if topic is None else _topic_or_none(lambda t=topic: _from_full_name(t))
        key = (parsed.tenant, f"{parsed.tenant}/{parsed.namespace}") if parsed else (UNKNOWN, UNKNOWN)
        totals[key][2] += 1
        totals[key][3] += obj[5]
    return dict(totals)


def largest(orphans: set[tuple], n: int) -> list[tuple]:
    return sorted(orphans, key=lambda o: (-o[8], o[0]))[:n]


def first_missing(missing: set[tuple], n: int) -> list[tuple]:
    return sorted(missing, key=lambda m: (m[0], m[1], m[2], m[3] is not None, m[3] or ""))[:n]


def summary_counts(inv: Inventory, expected: Expected) -> dict[str, int]:
    return {
        "orphan_ledgers": len(expected.orphan_ledgers),
        "orphan_offloaded_objects": len(expected.orphan_objects),
        "missing_ledgers": len(expected.missing_ledgers),
        "orphan_ledger_bytes": sum(o[8] for o in expected.orphan_ledgers),
        "orphan_object_bytes": sum(o[5] for o in expected.orphan_objects),
        "scanned_ledgers": len(inv.bk_ledgers),
        "references": len(inv.references),
        "scanned_objects": len(inv.offloaded_objects),
    }


def tuples(rows: Sequence[Row], schema) -> list[tuple]:
    return [as_tuple(r, schema) for r in rows]
