"""Configuration with Pulsar's names: flags > env > TOML file > defaults; unknown keys are errors.

Operators copy settings from ``broker.conf``, so keys are Pulsar's camelCase
(``twoPhaseDeletionMaxRetryDeleteCount``); the environment spelling is
``LEDGER_DELETION_<UPPER_SNAKE>`` (``LEDGER_DELETION_TWO_PHASE_DELETION_MAX_RETRY_DELETE_COUNT``).
A misspelt key fails loudly: a silently ignored safety setting is worse than none.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from deletion_service.errors import UserError

ENV_PREFIX = "LEDGER_DELETION_"
DEFAULT_TOPIC = "persistent://pulsar/system/__ledger_deletion"
SECRET_KEYS = frozenset({"adminTokenFile", "metadataStoreDigestFile", "brokerAuthTokenFile",
                         "brokerClientAuthenticationParameters"})
#: Upstream Pulsar's shipped spelling of a key, where it differs from ours, and the key it sets.  The broker
#: names its client's trust file ``brokerClientTrustCertsFilePath``.  The
#: proposal (PIP-299) names the pause ``dispatcherPauseOnAckPersistentStateEnabled``; the broker shipped
#: ``dispatcherPauseOnAckStatePersistentEnabled``, default false there (true here: the cursor core pauses by
#: default rather than lose acknowledgements).  Either spelling is accepted; setting both in one place is an error.
ALIASES: Mapping[str, str] = {
    "dispatcherPauseOnAckStatePersistentEnabled": "dispatcherPauseOnAckPersistentStateEnabled",
    "brokerClientTrustCertsFilePath": "brokerTlsTrustCertsFile"}
#: ``LEDGER_DELETION_*`` variables that are not config keys: the connection options (``--metadata-store``
#: …), the secrets only the environment carries, and the failpoints of the tests and the soak.
OTHER_ENV = frozenset({
    "LEDGER_DELETION_METADATA_STORE", "LEDGER_DELETION_BOOKKEEPER_METADATA_STORE", "LEDGER_DELETION_BROKER_URL",
    "LEDGER_DELETION_WEB_SERVICE_URL", "LEDGER_DELETION_DATA_DIR", "LEDGER_DELETION_METADATA_STORE_DIGEST",
    "LEDGER_DELETION_ADMIN_TOKEN", "LEDGER_DELETION_FAILPOINTS"})


class DeletionConfig(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    # PIP-186, with Pulsar's defaults (except that enabling is implied by running this tool)
    topic_two_phase_deletion_enabled: bool = True
    two_phase_deletion_ledger_deletion_parallelism: Annotated[int, Field(ge=1, le=1024)] = 4
    two_phase_deletion_reconsume_later_in_seconds: Annotated[int, Field(ge=0)] = 600
    two_phase_deletion_max_retry_delete_count: Annotated[int, Field(ge=0)] = 10
    # ours: never delete an orphan/manual request's ledger younger than this (a day)
    min_ledger_age_seconds: Annotated[int, Field(ge=0)] = 86_400
    # ours: a still-referenced trim/topic-deleted request younger than this (from markedAt) is
    # reconsumed, not acked: its mark phase sends before it writes and may not have written yet
    two_phase_deletion_in_use_grace_seconds: Annotated[int, Field(ge=0, le=86_400)] = 300
    # the cursor core (PIP-54, ack-state budget): the persisted ack state is held to this many bytes,
    # never above what the metadata store takes in one node (ZooKeeper: about 1 MB)
    managed_ledger_max_ack_state_in_bytes_to_persist: Annotated[int, Field(ge=1024, le=5 * 1024 * 1024)] = (
        5 * 1024 * 1024)
    # Pulsar's older count limit; ignored whenever the byte limit above is set explicitly: the two limits are exclusive
    managed_ledger_max_unacked_ranges_to_persist: Annotated[int, Field(ge=0)] | None = None
    # on by default: stop dispatching while a cursor's state does not fit its budget
    dispatcher_pause_on_ack_persistent_state_enabled: bool = True
    acknowledgment_at_batch_index_level_enabled: bool = False
    # Pulsar's clusterName: the ``cluster`` label of the cursor metrics
    cluster_name: str = "standalone"
    # access (files hold secrets; the values never appear in config show or logs)
    admin_token_file: Path | None = None
    metadata_store_digest_file: Path | None = None
    broker_auth_token_file: Path | None = None
    broker_tls_trust_certs_file: Path | None = None
    # the broker client's credentials as a broker configures its own client (Pulsar's keys): the plugin's
    # Java class (token, TLS, OAuth2) and its parameters in Pulsar's text form; a pulsar+ssl:// URL uses TLS
    broker_client_authentication_plugin: str | None = None
    broker_client_authentication_parameters: str | None = None
    # Pulsar's client key: accept a broker certificate the trust file cannot verify (tests only)
    tls_allow_insecure_connection: bool = False
    # the broker's Prometheus /metrics (http://host:port/metrics), where the backlog is read when there is no
    # admin REST (--web-service-url): an external pulsar-lite's [metrics] addr; the embedded broker's is found
    broker_metrics_url: str | None = None
    # tiered storage allow-list
    offload_allowed_drivers: list[str] = Field(default_factory=lambda: ["aws-s3", "S3", "aliyun-oss", "filesystem"])
    offload_allowed_buckets: list[str] = Field(default_factory=list)
    offload_allowed_endpoints: list[str] = Field(default_factory=list)
    offload_file_system_base_dir: Path | None = None
    # the cluster's offload settings (Pulsar's names), for ledgers offloaded by older brokers whose
    # offload context carries no driver metadata; unset: such ledgers stay listed (trim says why)
    managed_ledger_offload_driver: str | None = None
    managed_ledger_offload_bucket: str | None = None
    managed_ledger_offload_region: str | None = None
    managed_ledger_offload_service_endpoint: str | None = None
    # pacing and names
    max_deletions_per_second: Annotated[float, Field(ge=0)] = 0
    # ours: requests the delete phase takes per batch; reads, deletes and acks are batched over it
    # (a batch costs a few ZooKeeper round trips whatever its size, so bigger drains faster)
    two_phase_deletion_batch_size: Annotated[int, Field(ge=1, le=10_000)] = 1000
    ledger_deletion_topic: str = DEFAULT_TOPIC
    # cluster: one request topic for every tenant (above); namespace: persistent://<tenant>/<ns>/__ledger_deletion
    # per namespace, so producing to one namespace's topic can only ask for that namespace's ledgers
    ledger_deletion_topic_scope: Literal["cluster", "namespace"] = "cluster"
    # namespace scope: how often the daemon looks for new namespaces in the metadata store
    ledger_deletion_namespace_refresh_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    # ours: RETRY messages not yet due that the delete phase holds in memory; beyond it, those due last are left
    # unacked with the broker and asked for again when room is made (a broker that ignores delivery delays)
    ledger_deletion_max_held_in_memory: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    # ours: how often the daemon reads every cursor in scope for the cursor-health gauges (0: never)
    ledger_deletion_cursor_health_refresh_seconds: Annotated[int, Field(ge=0, le=86_400)] = 300
    # ours, the leak watcher: on a broker that deletes in one phase, request every ledger or offloaded part that
    # left every reference but is still stored after the settle delay (one replica watches; off: false)
    ledger_deletion_leak_watcher_enabled: bool = True
    # ours: how long a departed ledger may take to disappear from storage before it counts as leaked (a broker's
    # own delete normally finishes in seconds)
    ledger_deletion_leak_watcher_settle_seconds: Annotated[int, Field(ge=0, le=86_400)] = 120
    # ours: seconds between two passes of the leak watcher over the metadata store
    ledger_deletion_leak_watcher_pass_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    ledger_deletion_subscription: str = "ledger-deletion"
    ledger_deletion_dlq_subscription: str = "ledger-deletion-dlq"
    bookkeeper_ledgers_root_path: str = "/ledgers"
    # ours, the audit trail (<data-dir>/audit/audit-<n>.jsonl): a file holds at most this many bytes
    # before the next one starts; and whether every record is also published to <topic>-AUDIT
    ledger_deletion_audit_file_max_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024 * 1024
    ledger_deletion_audit_topic_enabled: bool = False
    # ours: decide BookKeeper requests in a child process of the daemon, so its two halves use two cores;
    # auto: when the metadata store is ZooKeeper and the daemon may use at least two CPUs
    ledger_deletion_delete_process: Literal["auto", "on", "off"] = "auto"

    @field_validator("offload_allowed_drivers", "offload_allowed_buckets", "offload_allowed_endpoints", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """Env values and Pulsar's broker.conf write lists as comma-separated text."""
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    def camel(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def env_name(key: str) -> str:
    return ENV_PREFIX + re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper()


@dataclass(frozen=True)
class Source:
    """Where one value came from, kept with the value so ``config show`` and error messages
    never have to work it out again (re-reading the file and the environment could disagree
    with what was actually loaded)."""

    kind: Literal["default", "file", "env", "flag"]
    detail: str = ""  # the file's path or the variable's name

    def label(self) -> str:
        """As ``config show`` prints it."""
        return {"default": "default", "file": f"file {self.detail}", "env": f"env {self.detail}",
                "flag": "--set"}[self.kind]

    def where(self) -> str:
        """As an error message names it ("invalid value for K in …")."""
        return {"default": "the defaults", "file": self.detail, "env": f"${self.detail}",
                "flag": "command line"}[self.kind]


DEFAULT = Source("default")


@dataclass(frozen=True)
class LoadedConfig:
    """The effective configuration and, for every key, the source its value came from."""

    config: DeletionConfig
    sources: Mapping[str, Source]

    def source(self, key: str) -> Source:
        return self.sources.get(key, DEFAULT)


def load_config(
    file: Path | None = None, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> LoadedConfig:
    """Merge the sources in precedence order (later beats earlier) and validate once, naming
    the source of a bad value.

    Our own merge rather than pydantic-settings: it has to remember which source won for
    each key (``config show``, error messages), and Pulsar writes lists as comma-separated
    text, where pydantic-settings decodes list values from the environment as JSON.
    """
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    layers: list[tuple[Source, Mapping[str, Any]]] = []
    if file is not None:
        layers.append((Source("file", str(file)), _read_toml(file)))
    for key in [*(to_camel(name) for name in DeletionConfig.model_fields), *ALIASES]:
        if env_name(key) in env:
            layers.append((Source("env", env_name(key)), {key: env[env_name(key)]}))
    for alias, ours in ALIASES.items():
        if env_name(alias) in env and env_name(ours) in env:
            _resolve_aliases(Source("env", f"{env_name(ours)} and ${env_name(alias)}"), {ours: 0, alias: 0})
    layers.append((Source("flag"), {k: v for k, v in (overrides or {}).items() if v is not None}))
    known = {to_camel(name) for name in DeletionConfig.model_fields}
    _check_env_names(env, known | set(ALIASES))
    for source, values in layers:
        for key, value in _resolve_aliases(source, values).items():
            if key not in known:  # snake_case too: one spelling, Pulsar's, so a key is never set twice
                raise UserError(f"unknown config key {key!r} in {source.where()}{_closest(key, known)} (keys are "
                                "camelCase as in Pulsar's broker.conf; 'ledger-deletion config show' lists them)")
            merged[key] = value
            sources[key] = source
    try:
        config = DeletionConfig.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        where = sources[key].where() if key in sources else "config"
        raise UserError(f"invalid value for {key} in {where}: {err.get('input')!r} ({_in_our_words(err)})") from e
    return LoadedConfig(config, {key: sources.get(key, DEFAULT) for key in config.camel()})


def _resolve_aliases(source: Source, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with upstream's spellings (:data:`ALIASES`) turned into ours; both spellings of one key
    in one source is an error (which one was meant cannot be known)."""
    resolved: dict[str, Any] = {}
    spelt: dict[str, str] = {}
    for key, value in values.items():
        ours = ALIASES.get(key, key)
        if ours in resolved:
            raise UserError(f"{spelt[ours]} and {key} both set in {source.where()}: they are one setting (upstream "
                            "Pulsar's spelling and this tool's); keep one")
        resolved[ours], spelt[ours] = value, key
    return resolved


def _closest(key: str, known: set[str]) -> str:
    """``; did you mean K?`` for the known key closest to ``key`` (its camelCase form first), or ``""``."""
    if to_camel(key) in known:
        return f"; did you mean {to_camel(key)}?"
    close = difflib.get_close_matches(key, sorted(known | set(ALIASES)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _check_env_names(env: Mapping[str, str], known: set[str]) -> None:
    """A ``LEDGER_DELETION_*`` variable that names no key is an error, as an unknown key in the file is:
    ``LEDGER_DELETION_MIN_LEDGER_AGE_SECOND=5`` silently ignored would keep the one-day default."""
    names = {env_name(key) for key in known} | OTHER_ENV
    for variable in sorted(v for v in env if v.startswith(ENV_PREFIX) and v not in names):
        suffixes = sorted(n.removeprefix(ENV_PREFIX) for n in names)  # the shared prefix would make all look close
        close = difflib.get_close_matches(variable.removeprefix(ENV_PREFIX), suffixes, n=1, cutoff=0.75)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        raise UserError(f"unknown environment variable {variable}{hint} (config keys are "
                        f"{ENV_PREFIX}<UPPER_SNAKE> of the camelCase keys 'ledger-deletion config show' lists)")


def _in_our_words(err: Any) -> str:
    """What a value should have been, without pydantic's phrasing or its links."""
    ctx = err.get("ctx") or {}
    whole = "expected a whole number"
    words = {"int_parsing": whole, "int_from_float": whole, "int_type": whole,
             "float_parsing": "expected a number", "bool_parsing": "expected true or false",
             "greater_than_equal": f"must be at least {ctx.get('ge')}",
             "less_than_equal": f"must be at most {ctx.get('le')}",
             "greater_than": f"must be more than {ctx.get('gt')}", "string_type": "expected text",
             "list_type": "expected a list (in the environment: comma-separated)"}
    return words.get(err["type"], str(err["msg"]).removeprefix("Value error, "))


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with open(file, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as e:
        raise UserError(f"config file {file} does not exist") from e
    except OSError as e:
        raise UserError(f"cannot read config file {file}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config file {file} is not valid TOML: {e}") from e
