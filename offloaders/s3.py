"""The S3 family (``aws-s3``, ``S3``, ``aliyun-oss``) through boto3.

Where the objects are comes from the ledger's driver metadata, as upstream's
``BlobStoreLocation`` reads it: ``bucket``, ``region``, ``serviceEndpoint``
(``endpoint`` in metadata written by the pre-jclouds S3 offloader).  Credentials
come from boto3's standard chain (env, profile, instance role), never from the
message.

Failure policy, because the caller owns retrying (tenacity, then reconsume):
botocore's own retries are capped (``max_attempts``, default 1 = no retry) and
timeouts are short, so a sick endpoint costs seconds, not minutes, and retry
storms do not multiply.  Errors are mapped once, in :func:`map_client_error`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from metastore.formats.custom_metadata import CURRENT_FORMAT_VERSION, FORMAT_VERSION_KEY, OBJECT_ML_NAME_KEY
from offloaders.allow_list import S3_FAMILY_DRIVERS, AllowList, decide
from offloaders.index_format import IndexFormatError, parse_index_v1, parse_index_v2
from offloaders.interface import (
    OFFLOAD_CONCURRENCY,
    IndexFacts,
    IndexKind,
    IndexRef,
    IndexState,
    Located,
    ObjectDeleteOutcome,
    ObjectHead,
    Offloader,
    OffloadError,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    StorageLocation,
    unique,
)

T = TypeVar("T")

#: What an index object's name adds to its data object's (``-index``): the two share a stem.
INDEX_SUFFIX = "-index"
#: S3's DeleteObjects limit.
MAX_DELETE_BATCH = 1000
#: Largest index object we read whole; upstream indexes are ~20 bytes per data block.
MAX_INDEX_BYTES = 64 * 1024 * 1024

ABSENT_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
    "TooManyRequests", "TooManyRequestsException", "RequestLimitExceeded", "ProvisionedThroughputExceeded",
    "InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeoutException",
    "ExpiredToken", "ExpiredTokenException", "OperationAborted",
})


def chunks(items: Sequence[T], size: int = MAX_DELETE_BATCH) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def map_client_error(err: Exception, what: str) -> OffloadError:
    """One botocore failure -> the typed error the caller acts on.

    Absent objects never reach here (callers test :func:`is_absent` first)."""
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        text = f"{what}: {code or status} {err.response.get('Error', {}).get('Message', '')}".strip()
        if code in TRANSIENT_CODES or status >= 500 or status == 429:
            return OffloadTransientError(text)
        if code == "NoSuchBucket":
            return OffloadTargetError(f"{text} (bucket missing: wrong endpoint/bucket, or deleted)")
        return OffloadTargetError(text)
    if isinstance(err, BotoConnectionError | HTTPClientError):
        # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
        # ConnectionClosedError, ResponseStreamingError, proxy errors.
        return OffloadTransientError(f"{what}: {err}")
    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return OffloadTargetError(f"{what}: no usable S3 credentials ({err})")
    return OffloadTargetError(f"{what}: {err}")


def stat_by_stem(list_objects: Callable[..., Iterator[ObjectHead]], target: OffloadTarget,
                 names: Sequence[str]) -> dict[str, ObjectHead | None]:
    """Each name's head (None: absent) from one listing per (location, stem): see
    :meth:`S3Offloader.stat_objects`."""
    wanted = unique(names)
    out: dict[str, ObjectHead | None] = dict.fromkeys(wanted)
    groups: dict[tuple[StorageLocation, str], set[str]] = {}
    for name in wanted:
        groups.setdefault((target.location_of(name), name.removesuffix(INDEX_SUFFIX)), set()).add(name)
    for (where, stem), group in groups.items():
        last = max(group)
        for head in list_objects(where, prefix=stem):
            if head.name in group:
                out[head.name] = head
            if head.name >= last:
                break
    return out


def is_absent(err: ClientError) -> bool:
    code = str(err.response.get("Error", {}).get("Code", ""))
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ABSENT_CODES or (status == 404 and code != "NoSuchBucket")


class S3Offloader(Offloader):
    driver_names: ClassVar[frozenset[str]] = S3_FAMILY_DRIVERS

    def __init__(self, allow: AllowList | None = None, *, connect_timeout: float = 2.0,
                 read_timeout: float = 5.0, max_attempts: int = 1,
                 default_region: str = "us-east-1") -> None:
        self.allow = allow or AllowList()
        self._config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": max(1, max_attempts), "mode": "standard"},
            # New botocore sends CRC checksums by default, which several
            # S3-compatible stores reject; only send what the operation requires.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # the delete phase keeps OFFLOAD_CONCURRENCY calls in flight: one connection each
            max_pool_connections=OFFLOAD_CONCURRENCY,
        )
        self._default_region = default_region
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ location

    @staticmethod
    def location(target: Located) -> tuple[str, str, str]:
        """(bucket, region, endpoint) from driver metadata; '' when unset."""
        md = target.driver_metadata
        bucket = (md.get("bucket") or "").strip()
        region = (md.get("region") or "").strip()
        endpoint = (md.get("serviceEndpoint") or md.get("endpoint") or "").strip()
        return bucket, region, endpoint

    def check_allowed(self, target: Located) -> None:
        """Every location the target reads or deletes at (the context's, each segment's own)."""
        for where in target.locations() if isinstance(target, OffloadTarget) else [target]:
            if where.driver_name.strip().lower() not in self.driver_names:
                raise OffloadNotAllowedError(f"driver {where.driver_name!r} is not served by the S3 offloader")
            bucket, _region, endpoint = self.location(where)
            decision = decide(self.allow, where.driver_name, bucket, endpoint)
            if not decision:
                raise OffloadNotAllowedError(decision.reason)

    def _client(self, target: Located) -> tuple[Any, str]:
        bucket, region, endpoint = self.location(target)
        if endpoint and "://" not in endpoint:
            endpoint = "https://" + endpoint
        key = (endpoint, region or self._default_region)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                config = self._config
                if endpoint:
                    # Upstream disables virtual-host buckets for a custom endpoint.
                    config = config.merge(Config(s3={"addressing_style": "path"}))
                session = boto3.Session()  # sessions are not thread-safe; one per client
                try:
                    client = session.client("s3", region_name=key[1], endpoint_url=endpoint or None,
                                            config=config)
                except (BotoCoreError, ValueError) as e:
                    # An invalid region or endpoint can never address storage: permanent, not a retry.
                    raise OffloadTargetError(f"cannot address s3 at endpoint {endpoint or '(default)'!r} "
                                             f"region {key[1]!r}: {e}") from e
                self._clients[key] = client
        return client, bucket

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (ClientError, BotoCoreError) as e:
            raise map_client_error(e, what) from e

    # ------------------------------------------------------------------ objects

    def head(self, target: OffloadTarget, name: str) -> ObjectHead | None:
        self.check_allowed(target)
        client, bucket = self._client(target.location_of(name))
        try:
            r = client.head_object(Bucket=bucket, Key=name)
        except ClientError as e:
            if is_absent(e):
                self._ensure_bucket(client, bucket)
                return None
            raise map_client_error(e, f"HEAD s3://{bucket}/{name}") from e
        except BotoCoreError as e:
            raise map_client_error(e, f"HEAD s3://{bucket}/{name}") from e
        meta = {str(k).lower(): str(v) for k, v in (r.get("Metadata") or {}).items()}
        modified = r.get("LastModified")
        modified_ms = int(modified.timestamp() * 1000) if modified is not None else None
        return ObjectHead(name, int(r.get("ContentLength", 0)), meta, modified_ms)

    def _ensure_bucket(self, client: Any, bucket: str) -> None:
        """A HEAD of a key in a missing bucket is a bare 404, just like a missing key.
        Before calling anything "absent" we make sure the bucket is there: a wrong
        bucket or endpoint must not turn every deletion into a silent success."""
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404 or str(e.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket"):
                raise OffloadTargetError(
                    f"bucket {bucket!r} does not exist at this endpoint (wrong endpoint/bucket, or deleted)"
                ) from e
            raise map_client_error(e, f"HEAD bucket s3://{bucket}") from e
        except BotoCoreError as e:
            raise map_client_error(e, f"HEAD bucket s3://{bucket}") from e

    def _read(self, target: OffloadTarget, name: str) -> tuple[bytes, dict[str, str]] | None:
        client, bucket = self._client(target.location_of(name))
        what = f"GET s3://{bucket}/{name}"
        try:
            r = client.get_object(Bucket=bucket, Key=name)
            with r["Body"] as stream:  # no Range: S3 answers 416 for a range on an empty object
                body = stream.read(MAX_INDEX_BYTES)
        except ClientError as e:
            if is_absent(e):
                self._ensure_bucket(client, bucket)
                return None
            raise map_client_error(e, what) from e
        except BotoCoreError as e:
            raise map_client_error(e, what) from e
        return body, {str(k).lower(): str(v) for k, v in (r.get("Metadata") or {}).items()}

    def stat_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, ObjectHead | None]:
        """One ``ListObjectsV2`` per object stem and location, instead of a HEAD per name.

        A part of an offloaded copy is two objects with one stem: ``<uuid>-ledger-<id>`` and its
        ``-index``, or a segment's ``<uuid>`` and ``<uuid>-index``.  A HEAD per object, and for each
        absent one a HEAD of its bucket (a missing bucket must never read as "absent"), cost four
        calls per absent part; a listing of the stem answers both names in one call, and a missing
        bucket fails it (``NoSuchBucket``, a target error), so "absent" needs no second call.  Keys
        come back in name order: the listing stops at the last name asked for."""
        self.check_allowed(target)
        return stat_by_stem(self.list_objects, target, names)

    def delete_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, ObjectDeleteOutcome]:
        """Find which names exist (:meth:`stat_objects`: S3 reports a deleted-but-absent key as
        deleted, so this is how we tell), then delete the present ones: data objects before index
        objects, so an interrupted deletion still leaves an index to verify."""
        self.check_allowed(target)
        outcomes: dict[str, ObjectDeleteOutcome] = {}
        present: list[str] = []
        for name, head in self.stat_objects(target, names).items():
            if head is None:
                outcomes[name] = ObjectDeleteOutcome.ABSENT
            else:
                present.append(name)
        data = [n for n in present if not n.endswith(INDEX_SUFFIX)]
        index = [n for n in present if n.endswith(INDEX_SUFFIX)]
        for group in (data, index):
            by_location: dict[StorageLocation, list[str]] = {}
            for name in group:  # each object where it was written (a segment may have its own location)
                by_location.setdefault(target.location_of(name), []).append(name)
            for where, located in by_location.items():
                client, bucket = self._client(where)
                for batch in chunks(located):
                    outcomes.update(self._delete_batch(client, bucket, batch))
        return {n: outcomes[n] for n in unique(names)}

    def _delete_batch(self, client: Any, bucket: str, batch: Sequence[str]) -> dict[str, ObjectDeleteOutcome]:
        what = f"DELETE s3://{bucket} ({len(batch)} keys)"
        if len(batch) == 1:
            self._call(what, lambda: client.delete_object(Bucket=bucket, Key=batch[0]))
            return {batch[0]: ObjectDeleteOutcome.DELETED}
        r = self._call(what, lambda: client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}))
        out = dict.fromkeys(batch, ObjectDeleteOutcome.DELETED)
        errors = r.get("Errors") or []
        transient: list[str] = []
        permanent: list[str] = []
        for err in errors:
            key, code = str(err.get("Key")), str(err.get("Code", ""))
            if code in ABSENT_CODES:
                out[key] = ObjectDeleteOutcome.ABSENT
            elif code in TRANSIENT_CODES:
                transient.append(f"{key}: {code}")
            else:
                permanent.append(f"{key}: {code} {err.get('Message', '')}".strip())
        if permanent:
            raise OffloadTargetError(f"{what}: " + "; ".join(permanent))
        if transient:
            raise OffloadTransientError(f"{what}: " + "; ".join(transient))
        return out

    # ------------------------------------------------------------------ listing

    def list_objects(self, where: StorageLocation, prefix: str = "",
                     start_after: str | None = None) -> Iterator[ObjectHead]:
        """``ListObjectsV2`` pages, lazily: S3 returns keys in UTF-8 binary order, so a
        caller listing a range of names stops as soon as it is past the range's end."""
        self.check_allowed(where)  # before the generator: a refusal is raised at the call
        client, bucket = self._client(where)
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if start_after:
            request["StartAfter"] = start_after
        return self._pages(client.get_paginator("list_objects_v2").paginate(**request),
                           f"LIST s3://{bucket}/{prefix}*")

    @staticmethod
    def _pages(pages: Iterable[dict[str, Any]], what: str) -> Iterator[ObjectHead]:
        iterator = iter(pages)
        while True:
            try:
                page = next(iterator)
            except StopIteration:
                return
            except (ClientError, BotoCoreError) as e:  # NoSuchBucket included: a listing of nothing is a lie
                raise map_client_error(e, what) from e
            for item in page.get("Contents") or ():
                modified = item.get("LastModified")
                yield ObjectHead(str(item["Key"]), int(item.get("Size", 0)), {},
                                 int(modified.timestamp() * 1000) if modified is not None else None)

    # ------------------------------------------------------------------ index facts

    def read_index(self, target: OffloadTarget, ref: IndexRef) -> IndexFacts:
        """GET the index (and, when it is missing or names no managed ledger, HEAD its data).

        A per-ledger index embeds the source ledger's metadata; a segment index
        names its ledgers, and only the ``ManagedLedgerName`` user metadata on the
        segment's objects names their topic."""
        self.check_allowed(target)
        name = ref.index_name
        got = self._read(target, name)
        if got is None:
            if self.head(target, ref.data_name) is None:
                return IndexFacts(ref, IndexState.ABSENT, f"{name} and {ref.data_name} absent")
            why = " (an interrupted offload or deletion)" if ref.kind is IndexKind.LEDGER else ""
            return IndexFacts(ref, IndexState.INDEX_MISSING, f"{name} absent but {ref.data_name} present{why}")
        body, meta = got
        version = meta.get(FORMAT_VERSION_KEY)
        if version is not None and version != CURRENT_FORMAT_VERSION:
            # Upstream stamps every object with version 1 and refuses to read others.
            return IndexFacts(ref, IndexState.MALFORMED, f"{name} has offloader format version {version!r}, "
                                                         f"expected {CURRENT_FORMAT_VERSION!r}")
        owner = meta.get(OBJECT_ML_NAME_KEY)
        if ref.kind is IndexKind.LEDGER:
            try:
                source = parse_index_v1(body)
            except IndexFormatError as e:
                return IndexFacts(ref, IndexState.MALFORMED, f"{name} is not a per-ledger offload index: {e}")
            return IndexFacts(ref, IndexState.READ, source=source, object_ml_name=owner)
        try:
            ledgers = parse_index_v2(body)
        except IndexFormatError as e:
            return IndexFacts(ref, IndexState.MALFORMED, f"{name} is not a streaming offload index: {e}")
        if owner is None:
            data = self.head(target, ref.data_name)
            owner = data.user_metadata.get(OBJECT_ML_NAME_KEY) if data is not None else None
        return IndexFacts(ref, IndexState.READ, ledgers=ledgers, object_ml_name=owner)
