"""DLQ settlement markers that only this tool can write: signed with a key kept in the metadata store.

Why markers at all: a DLQ listing reads the topic with a Reader (see :mod:`deletion_service.dlq.operations`),
which sees every stored message, settled or not; ``dlq purge``/``requeue`` therefore append a
marker naming the ids they settled, and a listing hides those ids.

Why they must be signed: anyone who may produce to a deletion topic (or, in namespace scope, to
its own namespace's DLQ) chooses a message's properties and body.  A marker recognised by its
property alone would let one forged message hide every parked request from ``list``, ``requeue`` and
``purge``.  So a marker counts only when its body carries an HMAC-SHA256,
over the DLQ topic it lives on and the ids it settles, under a key that producers cannot read:

* **Where the key lives: the metadata store** (:data:`KEY_PATH`, 32 random bytes, created by the
  first purge or requeue).  Every party that writes or reads markers already holds the metadata
  store — the daemon's admin API, and the CLI on any host — while a producer on a deletion topic
  holds only broker rights.  Whoever can read the metadata store can delete ledgers outright, so
  the key adds no weaker link.  A key in a data dir would not be shared by an operator's CLI on
  another host and the daemon's API; a key in the config would be one more secret to deploy.
* **Bound to its topic**: a marker copied into another DLQ settles nothing there.
* **Fail safe**: no key, an unreadable store, a bad signature, a body that is not exactly the
  small flat object we write — the message is *not* a marker.  A listing then shows it as a
  parked message (purgeable by id) and hides nothing: a listing never hides what it cannot
  prove was settled.  A lost key shows settled requests again; it never hides one.

Parsing runs on attacker bytes: the body is refused unread when larger than
:data:`MAX_MARKER_BYTES` or nested at all (one ``{``, one ``[``), so no JSON recursion and no
huge allocation ever happens here.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Sequence

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.consumer.copies import SETTLED_MARKER
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.seal import ParkedSeal
from metastore.interface import ABSENT, MetadataStore, MetadataStoreError, NodeExistsError

#: The signing key's node (hex text); only this tool reads or writes it.
KEY_PATH = "/ledger-deletion/dlq-marker-key"
#: A marker body is never larger: 5,000 ids of ``L:E`` and the signature.
MAX_MARKER_BYTES = 256 * 1024
#: Ids per marker (a big purge writes several).
IDS_PER_MARKER = 5000
_ID = re.compile(r"^-?\d{1,20}:-?\d{1,20}(:-?\d{1,20}){0,2}$")
_DOMAIN = b"ledger-deletion dlq settlement marker v1\n"


class MarkerKey:
    """The key markers are signed with; ``None`` when there is none (then nothing is a marker)."""

    def __init__(self, secret: bytes | None) -> None:
        self._secret = secret

    @classmethod
    def read(cls, store: MetadataStore | None) -> MarkerKey:
        """For readers: the key if the store has one; never raises (no key: nothing is a marker)."""
        if store is None:
            return cls(None)
        try:
            node = store.get(KEY_PATH)
        except Exception:  # noqa: BLE001 - an unreadable key hides nothing: every message is listed
            return cls(None)
        return cls(_secret_of(node.data) if node is not None else None)

    @classmethod
    def ensure(cls, store: MetadataStore) -> MarkerKey:
        """For writers (purge, requeue): the key, created if missing (a racing creator's key wins).
        Raises ``MetadataStoreError``: a purge must not ack what it cannot record."""
        node = store.get(KEY_PATH)
        if node is None:
            with contextlib.suppress(NodeExistsError):  # created meanwhile by another purge: read theirs below
                store.put(KEY_PATH, secrets.token_hex(32).encode(), ABSENT)
            node = store.get(KEY_PATH)
        secret = _secret_of(node.data) if node is not None else None
        if secret is None:
            raise MetadataStoreError(f"the DLQ marker key at {KEY_PATH} is missing or unreadable")
        return cls(secret)

    @property
    def usable(self) -> bool:
        return self._secret is not None

    def hold_seal(self) -> HoldSeal:
        """The same key seals the hold labels of RETRY copies (another domain: a marker's MAC is never a
        seal's, nor the reverse)."""
        return HoldSeal(self._secret)

    def parked_seal(self) -> ParkedSeal:
        """The same key seals why a DLQ copy was parked (its own domain too): a listing shows a reason, a
        last error and a count only when it holds."""
        return ParkedSeal(self._secret)

    def bodies(self, dlq_topic: str, ids: Sequence[str]) -> list[bytes]:
        """The marker bodies that settle ``ids`` on ``dlq_topic`` (one per :data:`IDS_PER_MARKER`)."""
        if self._secret is None:
            raise ValueError("no marker key")
        out = []
        for start in range(0, len(ids), IDS_PER_MARKER):
            chunk = [str(i) for i in ids[start:start + IDS_PER_MARKER]]
            out.append(json.dumps({"dlq": dlq_topic, "settled": chunk, "mac": self._mac(dlq_topic, chunk)},
                                  separators=(",", ":")).encode())
        return out

    def settled_by(self, dlq_topic: str, message: Received) -> list[str] | None:
        """The ids ``message`` settles if it is a marker this tool wrote on ``dlq_topic``; else ``None``
        (then it is an ordinary parked message, whatever its properties say).  Never raises."""
        try:
            return self._verified(dlq_topic, message)
        except Exception:  # noqa: BLE001 - attacker bytes: whatever goes wrong, it is not a marker
            return None

    def _verified(self, dlq_topic: str, message: Received) -> list[str] | None:
        if self._secret is None or SETTLED_MARKER not in message.properties:
            return None
        data = message.data
        if len(data) > MAX_MARKER_BYTES or data.count(b"{") != 1 or data.count(b"[") != 1:
            return None  # not the small flat object we write: never parsed
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("dlq") != dlq_topic:
            return None
        ids, mac = body.get("settled"), body.get("mac")
        if not isinstance(ids, list) or not isinstance(mac, str) or not all(
                isinstance(i, str) and _ID.match(i) for i in ids):
            return None
        if not hmac.compare_digest(mac.encode("ascii", "replace"), self._mac(dlq_topic, ids).encode()):
            return None
        return ids

    def _mac(self, dlq_topic: str, ids: Sequence[str]) -> str:
        assert self._secret is not None
        text = _DOMAIN + dlq_topic.encode("utf-8", "surrogatepass") + b"\n" + "\n".join(ids).encode()
        return hmac.new(self._secret, text, hashlib.sha256).hexdigest()


def _secret_of(data: bytes) -> bytes | None:
    try:
        secret = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return secret if len(secret) >= 16 else None
