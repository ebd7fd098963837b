"""Pulsar's metadata paths and names for a persistent topic.

Pulsar names a managed ledger ``<tenant>/<ns>/persistent/<encoded local name>``
(``TopicName#getPersistenceNamingEncoding``), where the local name is encoded
with Java's ``URLEncoder`` (UTF-8, space -> ``+``, only ``A-Za-z0-9.-*_`` kept).
That name appears in two places we must match byte for byte: the node path
``/managed-ledgers/<name>`` and BookKeeper custom metadata
``pulsar/managed-ledger=<name>`` -- a different encoding would make a live
ledger look orphaned.  A cursor's name is its subscription URL-encoded the same
way (:func:`pulsar_cursor_name`); schema ids use the partitioned topic's base name.

Only V2 names (``persistent://tenant/ns/local``) are supported; V1 names with
a cluster segment are refused rather than mapped by guesswork.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
SCHEMAS_ROOT = "/schemas"
NAMESPACE_ROOT = "/namespace"
DOMAIN = "persistent"
PARTITION_SUFFIX = "-partition-"

_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")
# NamedEntity.checkName in Pulsar: tenant and namespace names.
_ENTITY = re.compile(r"[-=:.\w]+", re.ASCII)
_PARTITION = re.compile(r"(.*)-partition-([0-9]+)", re.DOTALL)
_DOT_SEGMENTS = frozenset({".", ".."})
#: The longest managed-ledger name (``tenant/ns/persistent/<encoded local name>``) we accept.
MAX_NAME_CHARS = 4096


def is_utf8_text(text: str) -> bool:
    """False for strings with lone surrogates: JSON can carry them (``"\\ud800"``), UTF-8 cannot,
    so such a name has no metadata path, no BookKeeper metadata value, and no object key."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def url_encode(text: str) -> str:
    """``java.net.URLEncoder.encode(text, UTF_8)``."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in _SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def pulsar_cursor_name(subscription: str) -> str:
    """The name Pulsar gives the cursor of ``subscription``: ``Codec.encode(subscription)``, i.e.
    ``URLEncoder.encode(subscription, UTF_8)`` (space -> ``+``, ``+`` -> ``%2B``, ``/`` -> ``%2F``,
    ``%`` -> ``%25``, ``~`` -> ``%7E``, non-ASCII as percent-encoded UTF-8; ``A-Za-z0-9.-*_`` kept).

    Upstream, ``PersistentTopic`` opens a subscription's cursor with
    ``ledger.asyncOpenCursor(Codec.encode(subscriptionName), ...)``
    (``pulsar-broker/.../service/persistent/PersistentTopic.java``; ``Codec`` is
    ``pulsar-common/.../common/util/Codec.java``), and from then on that encoded string *is* the
    cursor's name in the managed-ledger layer: ``MetaStoreImpl`` stores the cursor at
    ``/managed-ledgers/<managed-ledger name>/<cursor name>``
    (``managed-ledger/.../mledger/impl/MetaStoreImpl.java``), and ``ManagedCursorImpl`` creates each
    of its cursor ledgers with ``LedgerMetadataUtils.buildAdditionalMetadataForCursor(name)``, which
    stamps ``pulsar/cursor`` = that name (``managed-ledger/.../mledger/impl/ManagedCursorImpl.java``,
    ``LedgerMetadataUtils.java``).  The cursor's info protobuf holds no name.  So the node name and
    the stamp are the same string, and every reader compares them as they are, never decoded: two
    subscriptions such as ``a b`` and ``a+b`` are the cursors ``a+b`` and ``a%2Bb``.
    """
    return url_encode(subscription)


def subscription_name(cursor: str) -> str:
    """The subscription a cursor named ``cursor`` belongs to (``Codec.decode``), for people to read;
    the cursor's own name when it is not in Pulsar's encoding (names are compared encoded)."""
    try:
        return url_decode(cursor)
    except ValueError:
        return cursor


def url_decode(text: str) -> str:
    """``java.net.URLDecoder.decode(text, UTF_8)``, refusing malformed escapes."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", text):
        raise ValueError(f"malformed %-escape in {text!r}")
    try:
        return unquote_to_bytes(text.replace("+", " ")).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{text!r} does not decode to UTF-8 ({exc})") from exc


def check_entity(label: str, value: str) -> str:
    """A tenant or namespace name Pulsar accepts (and that names one path segment); ``ValueError`` if not."""
    if not _ENTITY.fullmatch(value):
        raise ValueError(f"invalid {label} {value!r} (allowed: letters, digits, - = : . _)")
    if value in _DOT_SEGMENTS:  # a path segment '.'/'..' names another node, or none
        raise ValueError(f"invalid {label} {value!r}")
    return value


def parse_namespace(text: str) -> str:
    """``tenant/ns`` checked as Pulsar checks both names; ``ValueError`` naming the bad part."""
    tenant, _, namespace = text.partition("/")
    check_entity("tenant", tenant)
    check_entity("namespace", namespace)
    return text


@dataclass(frozen=True)
class TopicName:
    """A persistent V2 topic: ``persistent://<tenant>/<namespace>/<local_name>``."""

    tenant: str
    namespace: str
    local_name: str

    def __post_init__(self) -> None:
        check_entity("tenant", self.tenant)
        check_entity("namespace", self.namespace)
        if not self.local_name:
            raise ValueError("empty topic local name")
        if self.local_name in _DOT_SEGMENTS:
            raise ValueError(f"invalid topic local name {self.local_name!r}")
        if not is_utf8_text(self.local_name):  # a lone surrogate has no UTF-8 form, so no path
            raise ValueError("topic local name is not valid Unicode text (lone surrogate)")
        if "/" in self.local_name:  # Pulsar would read t/ns/a/b as a V1 name
            raise ValueError(f"topic local name {self.local_name!r} contains '/'")
        if len(self.tenant) + len(self.namespace) + 3 * len(self.local_name.encode("utf-8")) > MAX_NAME_CHARS and (
                len(managed_ledger_name(self)) > MAX_NAME_CHARS):
            # a name no metadata request can carry safely: refused here, before any I/O, so it can
            # never reach ZooKeeper and drop the connection every other request shares
            raise ValueError(f"topic name too long: its managed-ledger name would exceed {MAX_NAME_CHARS} characters")

    def __str__(self) -> str:
        return f"{DOMAIN}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def partition_index(self) -> int | None:
        """N for ``<base>-partition-N``, else ``None``."""
        match = _PARTITION.fullmatch(self.local_name)
        return int(match.group(2)) if match else None

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        match = _PARTITION.fullmatch(self.local_name)
        return TopicName(self.tenant, self.namespace, match.group(1)) if match else self


def parse_topic(name: str) -> TopicName:
    """Parse ``persistent://t/ns/x``, ``t/ns/x`` or bare ``x`` (= ``public/default/x``, as Pulsar)."""
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain != DOMAIN:
            raise ValueError(f"{name!r}: only persistent topics have ledgers (domain {domain!r})")
    else:
        rest = name
        if "/" not in rest:
            rest = f"public/default/{rest}"
    parts = rest.split("/", 3)
    if len(parts) == 4:
        raise ValueError(f"{name!r}: V1 topic names (tenant/cluster/namespace/topic) are not supported")
    if len(parts) != 3:
        raise ValueError(f"{name!r}: expected persistent://<tenant>/<namespace>/<topic>")
    return TopicName(*parts)


def _topic(topic: TopicName | str) -> TopicName:
    return topic if isinstance(topic, TopicName) else parse_topic(topic)


def managed_ledger_name(topic: TopicName | str) -> str:
    """The managed-ledger name, as in BK custom metadata: ``t/ns/persistent/<encoded>``."""
    if isinstance(topic, TopicName):
        return _managed_ledger_name_of(topic)
    return _managed_ledger_name_of_text(topic)


def _managed_ledger_name_of(t: TopicName) -> str:
    return f"{t.tenant}/{t.namespace}/{DOMAIN}/{url_encode(t.local_name)}"


@functools.lru_cache(maxsize=16_384)
def _managed_ledger_name_of_text(topic: str) -> str:
    """Memoized: the delete phase asks this of every request's topic, and a batch names few topics
    (a name that does not parse raises, and is not cached)."""
    return _managed_ledger_name_of(parse_topic(topic))


def managed_ledger_path(topic: TopicName | str) -> str:
    """``/managed-ledgers/t/ns/persistent/<encoded local name>``."""
    return f"{MANAGED_LEDGERS_ROOT}/{managed_ledger_name(topic)}"


def cursor_path(topic: TopicName | str, subscription: str) -> str:
    """The cursor node of ``subscription``: child of the managed-ledger node, named by the cursor's
    name (:func:`pulsar_cursor_name`)."""
    if not subscription:
        raise ValueError("empty subscription name")
    return f"{managed_ledger_path(topic)}/{pulsar_cursor_name(subscription)}"


def schema_id(topic: TopicName | str) -> str:
    """Pulsar's schema id ``t/ns/<encoded base topic>`` (also BK's ``pulsar/schemaId``)."""
    base = _topic(topic).base
    return f"{base.tenant}/{base.namespace}/{url_encode(base.local_name)}"


def schema_path(topic: TopicName | str) -> str:
    """``/schemas/t/ns/<encoded base topic>``: partitions share their base topic's schema."""
    return f"{SCHEMAS_ROOT}/{schema_id(topic)}"


def namespace_ownership_prefix(topic_or_namespace: TopicName | str) -> str:
    """``/namespace/<tenant>/<ns>`` for ``"tenant/ns"`` or a topic; bundle owners are children."""
    is_namespace = isinstance(topic_or_namespace, str) and re.fullmatch(r"[^/:]+/[^/]+", topic_or_namespace)
    if is_namespace:
        tenant, namespace = str(topic_or_namespace).split("/")
        TopicName(tenant, namespace, "x")  # validates both names
    else:
        t = _topic(topic_or_namespace)
        tenant, namespace = t.tenant, t.namespace
    return f"{NAMESPACE_ROOT}/{tenant}/{namespace}"


def topic_from_managed_ledger_name(name: str) -> TopicName:
    """Inverse of :func:`managed_ledger_name`; ``ValueError`` for non-topic names."""
    parts = name.split("/")
    if len(parts) != 4 or parts[2] != DOMAIN:
        raise ValueError(f"{name!r} is not a managed-ledger name <tenant>/<ns>/persistent/<topic>")
    local = url_decode(parts[3])
    if url_encode(local) != parts[3]:
        raise ValueError(f"{name!r}: topic part is not in Pulsar's URL encoding")
    return TopicName(parts[0], parts[1], local)


def topic_from_managed_ledger_path(path: str) -> TopicName:
    """Inverse of :func:`managed_ledger_path`."""
    prefix = MANAGED_LEDGERS_ROOT + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path!r} is not under {MANAGED_LEDGERS_ROOT}")
    return topic_from_managed_ledger_name(path[len(prefix) :])
