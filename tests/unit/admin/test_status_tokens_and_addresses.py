"""The admin API's pure parts: status mapping, token loading, address rules, the committed OpenAPI,
and the parse of the broker metrics behind the in-flight estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from deletion_service.admin.answers import HttpOutcome, http_answer
from deletion_service.admin.app import openapi_document, render_openapi
from deletion_service.admin.deps import _hosts
from deletion_service.admin.server import is_loopback, parse_address
from deletion_service.admin.token import TOKEN_ENV, load_admin_token
from deletion_service.broker.interface import BrokerError
from deletion_service.errors import UserError
from deletion_service.inflight import parse_backlog_metrics
from deletion_service.service import SyncResult

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("outcome", "reason", "status", "http_outcome", "retry_after"),
    [
        ("deleted", "deleted", 200, HttpOutcome.DELETED, None),
        ("would_delete", "dry run: would delete (verified)", 200, HttpOutcome.WOULD_DELETE, None),
        ("absent", "/ledgers/00/0000/L0001 already absent", 200, HttpOutcome.ABSENT, None),
        ("still_in_use", "in the ledger list of …", 409, HttpOutcome.STILL_IN_USE, None),
        ("metadata_mismatch", "pulsar/managed-ledger is other", 422, HttpOutcome.METADATA_MISMATCH, None),
        ("not_yet", "ledger is OPEN", 409, HttpOutcome.NOT_YET, 600),
        ("unavailable", "not connected to ZooKeeper", 503, HttpOutcome.UNAVAILABLE, 10),
        ("failed", "cannot verify: metadata of t unreadable", 502, HttpOutcome.FAILED, None),
    ],
)
def test_outcome_to_status(outcome: str, reason: str, status: int, http_outcome: HttpOutcome,
                           retry_after: int | None) -> None:
    answer = http_answer(SyncResult(outcome, reason), not_yet_retry_after_s=600)
    assert (answer.status, answer.outcome, answer.retry_after_s) == (status, http_outcome, retry_after)


def test_not_yet_retry_after_is_at_least_one_second() -> None:
    assert http_answer(SyncResult("not_yet", "ledger is OPEN"), 0).headers() == {"Retry-After": "1"}
    young = SyncResult("not_yet", "ledger younger than minLedgerAgeSeconds", retry_after_s=3599.6)
    assert http_answer(young, 600).headers() == {"Retry-After": "3600"}


def test_token_from_file_wins_over_env(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("s3cret-from-file\n")
    assert load_admin_token(f, {TOKEN_ENV: "from-env"}) == "s3cret-from-file"
    assert load_admin_token(None, {TOKEN_ENV: " from-env "}) == "from-env"
    assert load_admin_token(None, {}) is None


@pytest.mark.parametrize(("content", "message"), [("", "is empty"), ("  \n", "is empty"),
                                                  ("two words", "visible ASCII")])
def test_bad_token_file_is_refused(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "token"
    f.write_text(content)
    with pytest.raises(UserError, match=message) as e:
        load_admin_token(f, {})
    assert "two words" not in str(e.value)  # the secret never appears in the error


def test_missing_token_file_and_empty_env_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_admin_token(tmp_path / "nope", {})
    with pytest.raises(UserError, match=f"\\${TOKEN_ENV} is empty"):
        load_admin_token(None, {TOKEN_ENV: ""})


def test_addresses() -> None:
    assert parse_address("127.0.0.1:8090") == ("127.0.0.1", 8090)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad in ("8090", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(UserError, match="expected HOST:PORT"):
            parse_address(bad)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "broker.example.com"))


def test_broker_hosts_for_readiness() -> None:
    assert _hosts("pulsar://a:6650,b:6651") == [("a", 6650), ("b", 6651)]
    assert _hosts("pulsar+ssl://broker") == [("broker", 6651)]
    assert _hosts("pulsar://[::1]:6650") == [("::1", 6650)]


def test_committed_openapi_matches_the_code() -> None:
    committed = (ROOT / "deploy" / "openapi.json").read_text(encoding="utf-8")
    assert committed == render_openapi(openapi_document()), "run: python scripts/gen_openapi.py"


def test_openapi_documents_every_route_and_status() -> None:
    doc = openapi_document()
    ops = {(m.upper(), p): o for p, item in doc["paths"].items() for m, o in item.items()}
    assert set(ops) == {
        ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
        ("GET", "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count"),
        ("GET", "/admin/v2/ledger-deletion/dlq"), ("POST", "/admin/v2/ledger-deletion/delete"), ("GET", "/status"),
    }
    for op in ops.values():
        assert op["summary"] and op["description"]
    delete = ops[("POST", "/admin/v2/ledger-deletion/delete")]
    assert {"200", "400", "401", "409", "422", "503"} <= set(delete["responses"])
    assert delete["security"] == [{"adminToken": []}]
    inflight = ops[("GET", "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count")]
    assert inflight["responses"]["200"]["content"]["application/json"]["schema"]["type"] == "integer"


# What pulsar-lite's /metrics prints (abridged), with a few lines a regex would have to get right.
_METRICS = """\
# HELP pulsar_subscription_back_log Unacknowledged stored entries
# TYPE pulsar_subscription_back_log gauge
pulsar_subscription_back_log{partition="0",namespace="tn/ns",subscription="ledger-deletion",topic="x"} 1
pulsar_subscription_back_log{cluster="c",namespace="tn/ns",partition="1",subscription="ledger-deletion",topic="x"} 2
pulsar_subscription_back_log{namespace="tn/ns",partition="-1",subscription="ledger-deletion",topic="plain"} 4.0
pulsar_subscription_back_log{namespace="tn/ns",subscription="ledger-deletion",topic="plain"} 1e1
pulsar_subscription_back_log{namespace="tn/ns",subscription="ledger-deletion",topic="nan"} NaN
pulsar_subscription_back_log{namespace="tn/ns",subscription="other",topic="x",partition="0"} 9
# HELP pulsar_subscription_msg_backlog_other Not the backlog metric
# TYPE pulsar_subscription_msg_backlog_other gauge
pulsar_subscription_msg_backlog_other{namespace="tn/ns",subscription="ledger-deletion",topic="x"} 50
"""


def test_backlog_metrics_count_only_the_subscriptions_finite_backlog_samples() -> None:
    assert parse_backlog_metrics(_METRICS, "ledger-deletion") == {
        "persistent://tn/ns/x-partition-0": 1,
        "persistent://tn/ns/x-partition-1": 2,
        "persistent://tn/ns/plain": 14,  # partition -1 and no partition both name the bare topic
    }
    assert parse_backlog_metrics(_METRICS, "other") == {"persistent://tn/ns/x-partition-0": 9}
    assert parse_backlog_metrics("", "ledger-deletion") == {}


def test_unparseable_metrics_are_a_broker_error_not_a_zero() -> None:
    with pytest.raises(BrokerError, match="cannot parse broker metrics"):
        parse_backlog_metrics('pulsar_subscription_back_log{subscription="ledger-deletion" 3\n', "ledger-deletion")
