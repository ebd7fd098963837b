"""Which offload targets this deleter may touch: a pure decision over config lists.

A delete request names its own driver, bucket and endpoint (they travel in the
message's ``driverMetadata``).  Without an allow-list, anyone able to publish to
the deletion topic could make the daemon delete objects in any bucket its
credentials reach.  So:

* ``offloadAllowedDrivers`` defaults to the drivers we implement (the S3 family
  and ``filesystem``); a driver we do not know is never allowed, even if listed;
* ``offloadAllowedBuckets`` / ``offloadAllowedEndpoints`` empty means **any**
  bucket / endpoint (documented default, convenient for a single-tenant cluster);
  set them in production.  An empty endpoint in a target means "the provider's
  default endpoint" (AWS); when endpoints are restricted it matches only the
  special entry ``default``.

Names of drivers compare case-insensitively, as upstream's
``JCloudBlobStoreProvider.getProvider`` does (``S3`` and ``s3`` are one driver).
Endpoints compare after normalisation (scheme and host lower-cased, default
port and trailing slash dropped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Upstream drivers that speak the S3 protocol: ``aws-s3`` (jclouds' AWS provider),
#: ``S3`` (generic S3 API, used for MinIO & co; also the pre-jclouds driver name) and
#: ``aliyun-oss`` (``AnonymousProviderMetadata(new S3ApiMetadata())``).
#: ``google-cloud-storage``, ``azureblob`` and ``transient`` are upstream drivers
#: but not S3 here, so they are unknown to us and never allowed.
S3_FAMILY_DRIVERS: frozenset[str] = frozenset({"aws-s3", "s3", "aliyun-oss"})
FILESYSTEM_DRIVERS: frozenset[str] = frozenset({"filesystem"})
KNOWN_DRIVERS: frozenset[str] = S3_FAMILY_DRIVERS | FILESYSTEM_DRIVERS
DEFAULT_ALLOWED_DRIVERS: frozenset[str] = KNOWN_DRIVERS

#: Entry of ``offloadAllowedEndpoints`` that matches a target with no endpoint.
DEFAULT_ENDPOINT = "default"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_driver(name: str) -> str:
    return name.strip().lower()


def normalize_endpoint(endpoint: str | None) -> str:
    """``HTTPS://S3.Example.com:443/`` -> ``https://s3.example.com``; '' for none.

    A bare host (``minio:9000``) is read as ``https://``, the scheme the S3
    offloader then connects with, so what is compared is what is contacted."""
    if endpoint is None or not endpoint.strip():
        return ""
    text = endpoint.strip()
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    path = parts.path.rstrip("/")
    return f"{scheme}://{netloc}{path}"


@dataclass(frozen=True, slots=True)
class AllowList:
    """The three config lists, normalised once."""

    drivers: frozenset[str] = DEFAULT_ALLOWED_DRIVERS
    buckets: frozenset[str] = frozenset()
    endpoints: frozenset[str] = frozenset()

    @classmethod
    def of(cls, drivers: Iterable[str] | None = None, buckets: Iterable[str] | None = None,
           endpoints: Iterable[str] | None = None) -> AllowList:
        """``None`` (or empty) drivers means the default set; empty buckets/endpoints mean any."""
        d = frozenset(normalize_driver(x) for x in (drivers or ()) if x.strip()) or DEFAULT_ALLOWED_DRIVERS
        b = frozenset(x.strip() for x in (buckets or ()) if x.strip())
        e = frozenset(DEFAULT_ENDPOINT if x.strip().lower() == DEFAULT_ENDPOINT else normalize_endpoint(x)
                      for x in (endpoints or ()) if x.strip())
        return cls(d, b, e)

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> AllowList:
        """From camelCase config keys; a string value is split on commas (env/flag form)."""
        def items(key: str) -> list[str]:
            value = config.get(key)
            if value is None:
                return []
            if isinstance(value, str):
                return [v for v in value.split(",") if v.strip()]
            return [str(v) for v in value]  # type: ignore[attr-defined]

        return cls.of(items("offloadAllowedDrivers"), items("offloadAllowedBuckets"),
                      items("offloadAllowedEndpoints"))


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.allowed


def decide_driver(allow: AllowList, driver: str) -> Decision:
    """Whether the driver alone is known and allowed (before any target is seen)."""
    d = normalize_driver(driver or "")
    if d not in KNOWN_DRIVERS:
        known = ", ".join(sorted(KNOWN_DRIVERS))
        return Decision(False, f"unknown offload driver {driver!r} (known: {known})")
    if d not in allow.drivers:
        return Decision(False, f"driver {driver!r} not in offloadAllowedDrivers")
    return Decision(True, "driver allowed")


def decide(allow: AllowList, driver: str, bucket: str | None = None, endpoint: str | None = None) -> Decision:
    """Whether (driver, bucket, endpoint) may be touched, and why not.

    ``bucket``/``endpoint`` are ignored for the ``filesystem`` driver, whose
    containment is the configured base directory (see ``offloaders.filesystem``)."""
    by_driver = decide_driver(allow, driver)
    if not by_driver:
        return by_driver
    if normalize_driver(driver) in FILESYSTEM_DRIVERS:
        return Decision(True, "filesystem driver allowed")
    if not bucket:
        return Decision(False, f"driver {driver!r} target names no bucket")
    if allow.buckets and bucket not in allow.buckets:
        return Decision(False, f"bucket {bucket!r} not in offloadAllowedBuckets")
    ep = normalize_endpoint(endpoint)
    if allow.endpoints:
        key = ep or DEFAULT_ENDPOINT
        if key not in allow.endpoints:
            shown = endpoint or "(provider default)"
            return Decision(False, f"endpoint {shown!r} not in offloadAllowedEndpoints")
    return Decision(True, "allowed")


def target_key(driver: str, metadata: Mapping[str, str]) -> str:
    """One offload target's identity for its circuit breaker: driver family, endpoint, bucket
    (``storageBasePath`` for the filesystem driver), normalised as the allow-list compares them,
    so two spellings of one endpoint share a breaker and two buckets never do."""
    d = normalize_driver(driver or "")
    if d in FILESYSTEM_DRIVERS:
        return f"filesystem {metadata.get('storageBasePath', '')}"
    family = "s3" if d in S3_FAMILY_DRIVERS else d
    endpoint = normalize_endpoint(metadata.get("serviceEndpoint") or metadata.get("endpoint")) or DEFAULT_ENDPOINT
    return f"{family} {endpoint} bucket={metadata.get('bucket', '')}"


def location_keys(locations: Iterable[tuple[str, Mapping[str, str]]]) -> list[str]:
    """The breaker keys of (driver, metadata) locations, each once, in order."""
    return list(dict.fromkeys(target_key(driver, metadata) for driver, metadata in locations))
