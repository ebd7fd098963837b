"""The Helm chart, rendered by Helm's own engine (helm-python-sdk: Helm's Go SDK, no binary).

Rendered for the default values and with every option on, each with the data dir on a claim per
replica (a StatefulSet, the default) and on an emptyDir (a Deployment); every manifest is validated
against the Kubernetes schemas (kubernetes-validate, strict: unknown fields fail) and the
Prometheus Operator's objects against that operator's generated models. The ConfigMap is
read by the daemon's own config loader; the containers' arguments by the real CLI.
"""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from deletion_service.config import DeletionConfig, load_config
from tests.support.helm_chart import ALL_ON, CHART, ROOT, helm, kubernetes_validate, render

RULES = ROOT / "deploy" / "prometheus" / "ledger-deletion-alerts.yml"
KUBE_VERSION = "1.29"  # the oldest minor the schemas are checked against; the chart asks for >= 1.25
#: The *File keys the chart sets from `auth` (mounted Secrets), never from `config`.
CHART_MANAGED = {"adminTokenFile", "metadataStoreDigestFile", "brokerAuthTokenFile", "brokerTlsTrustCertsFile"}

DATA_DIR = "/var/lib/ledger-deletion/data"  # the image's writable tree (deploy/Dockerfile)


def _emptydir(values: dict[str, Any]) -> dict[str, Any]:
    """values with daemon.persistence.enabled=false: the Deployment and its emptyDir."""
    values = copy.deepcopy(values)
    values.setdefault("daemon", {}).setdefault("persistence", {})["enabled"] = False
    return values


@pytest.fixture(scope="module")
def defaults() -> dict[str, dict]:
    return render()


@pytest.fixture(scope="module")
def all_on() -> dict[str, dict]:
    return render(ALL_ON)


@pytest.fixture(scope="module")
def emptydir() -> dict[str, dict]:
    return render(_emptydir({}))


@pytest.fixture(scope="module")
def all_on_emptydir() -> dict[str, dict]:
    return render(_emptydir(ALL_ON))


def test_defaults_render_the_workloads_and_no_operator_objects(defaults: dict[str, dict]) -> None:
    assert set(defaults) == {"ConfigMap", "StatefulSet", "Service", "ServiceAccount", "PodDisruptionBudget", "CronJob",
                             "PersistentVolumeClaim"}  # the scan's reports (test_helm_scan_reports_and_spark.py)


def test_all_options_on_adds_the_operator_objects(all_on: dict[str, dict]) -> None:
    assert set(all_on) == {
        "ConfigMap",
        "StatefulSet",
        "Service",
        "ServiceAccount",
        "PodDisruptionBudget",
        "CronJob",
        "PersistentVolumeClaim",
        "ServiceMonitor",
        "PrometheusRule",
    }
    monitor, service = all_on["ServiceMonitor"], all_on["Service"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # the operator's selector wins
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "ledger-deletion"  # the rules' job=


def _validate_strictly(objects: dict[str, dict]) -> None:
    for kind, obj in objects.items():
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            # imported here: the module builds about 4,000 models (3 s), which every test process
            # collecting this file would pay, not just the one that runs these tests
            model = getattr(importlib.import_module("cloudcoil.models.prometheus_operator.v1"), kind)
            # the models ignore unknown fields: a round trip that loses one is a failure
            assert model.model_validate(obj).model_dump(by_alias=True, exclude_none=True, mode="json") == obj, kind
        else:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("which", ["defaults", "all_on", "emptydir", "all_on_emptydir"])
def test_every_manifest_validates_against_its_schema(which: str, request: pytest.FixtureRequest) -> None:
    _validate_strictly(request.getfixturevalue(which))


@pytest.mark.parametrize("which", ["defaults", "emptydir"])
def test_the_validators_do_reject_a_broken_manifest(which: str, request: pytest.FixtureRequest) -> None:
    broken = json.loads(json.dumps(_workload(request.getfixturevalue(which))))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/healthz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


def test_the_validators_look_inside_the_claim_template(defaults: dict[str, dict]) -> None:
    broken = json.loads(json.dumps(defaults["StatefulSet"]))
    broken["spec"]["volumeClaimTemplates"][0]["spec"]["storageClass"] = "fast-ssd"  # storageClassName, misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


def test_the_prometheus_rule_is_the_rules_file(all_on: dict[str, dict]) -> None:
    assert (CHART / "files" / "ledger-deletion-alerts.yml").resolve() == RULES.resolve(), "one file, linked"
    assert all_on["PrometheusRule"]["spec"] == yaml.safe_load(RULES.read_text())
    assert all_on["PrometheusRule"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def _workload(objects: dict[str, dict]) -> dict:
    """The daemon's StatefulSet or Deployment: exactly one of them is rendered."""
    (kind,) = {"StatefulSet", "Deployment"} & objects.keys()
    return objects[kind]


def _daemon(objects: dict[str, dict]) -> dict:
    return _workload(objects)["spec"]["template"]["spec"]


def _claim(objects: dict[str, dict]) -> dict:
    (claim,) = objects["StatefulSet"]["spec"]["volumeClaimTemplates"]
    return claim


def _scan_template(objects: dict[str, dict]) -> dict:
    return objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]


def _scan(objects: dict[str, dict]) -> dict:
    return _scan_template(objects)["spec"]


def _config_file(objects: dict[str, dict], tmp_path: Path) -> Path:
    path = tmp_path / "ledger-deletion.toml"
    path.write_text(objects["ConfigMap"]["data"]["ledger-deletion.toml"])
    return path


@pytest.mark.parametrize("which", ["defaults", "all_on"])
def test_the_daemon_loads_the_configmap_and_finds_its_secrets_mounted(
    which: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    objects = request.getfixturevalue(which)
    cfg = load_config(_config_file(objects, tmp_path), env={}).config.camel()
    values = ALL_ON if which == "all_on" else {}
    for key, value in values.get("config", {}).items():
        assert cfg[key] == value, key
    for pod in (_daemon(objects), _scan(objects)):
        container = pod["containers"][0]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
        for key in CHART_MANAGED:
            if cfg[key] is None:
                continue
            directory, file = cfg[key].rsplit("/", 1)
            assert mounts[directory] in secrets and secrets[mounts[directory]]["items"][0]["path"] == file, key
    expected = {"adminTokenFile"} | (CHART_MANAGED if which == "all_on" else set())
    assert {k for k in CHART_MANAGED if cfg[k] is not None} == expected


def test_replicas_are_the_parallelism(
    defaults: dict[str, dict], all_on: dict[str, dict], emptydir: dict[str, dict], all_on_emptydir: dict[str, dict]
) -> None:
    parallelism = DeletionConfig().two_phase_deletion_ledger_deletion_parallelism
    assert defaults["StatefulSet"]["spec"]["replicas"] == emptydir["Deployment"]["spec"]["replicas"] == parallelism
    assert all_on["StatefulSet"]["spec"]["replicas"] == all_on_emptydir["Deployment"]["spec"]["replicas"] == 6


def test_probes_security_and_resources(defaults: dict[str, dict]) -> None:
    for pod in (_daemon(defaults), _scan(defaults)):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        c = pod["containers"][0]
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    c = _daemon(defaults)["containers"][0]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert defaults["Service"]["spec"]["ports"][0]["targetPort"] == "http"
    assert defaults["Service"]["spec"]["selector"] == _workload(defaults)["spec"]["selector"]["matchLabels"]
    assert defaults["PodDisruptionBudget"]["spec"]["selector"] == _workload(defaults)["spec"]["selector"]


def test_the_scan_is_a_dry_run_unless_asked(defaults: dict[str, dict], all_on: dict[str, dict]) -> None:
    dry = _scan(defaults)["containers"][0]
    assert "--enqueue" not in dry["args"] and "--pushgateway" not in dry["args"]
    assert dry["image"].endswith("-spark")
    wet = _scan(all_on)["containers"][0]["args"]
    assert "--enqueue" in wet and wet[wet.index("--pushgateway") + 1] == "http://pushgateway.monitoring:9091"
    assert "--dry-run" in _daemon(all_on)["containers"][0]["args"]


@pytest.mark.parametrize("which", ["defaults", "all_on"])
def test_the_cli_accepts_the_rendered_arguments(which: str, request: pytest.FixtureRequest) -> None:
    objects = request.getfixturevalue(which)
    for pod in (_daemon(objects), _scan(objects)):
        args = pod["containers"][0]["args"]
        r = subprocess.run(
            [sys.executable, "-m", "deletion_service.cli.main", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, (args, r.stdout + r.stderr)


def test_values_mirror_the_daemons_config_keys_and_defaults() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    fields = set(DeletionConfig().camel())
    assert set(schema["properties"]) == fields - CHART_MANAGED, "regenerate values.schema.json's config block"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    defaults = DeletionConfig().camel()
    assert {k: v for k, v in values.items() if v != defaults[k]} == {}, "the chart must not change the defaults"


def test_the_schema_refuses_a_misspelt_key_and_a_bad_value() -> None:
    with pytest.raises(helm.HelmValuesError, match="twoPhaseDeletionMaxRetryDeleteCunt"):
        render({"config": {"twoPhaseDeletionMaxRetryDeleteCunt": 3}})
    with pytest.raises(helm.HelmValuesError, match="twoPhaseDeletionLedgerDeletionParallelism"):
        render({"config": {"twoPhaseDeletionLedgerDeletionParallelism": 0}})
    with pytest.raises(helm.HelmValuesError, match="brokerUrl"):
        render({"pulsar": {"brokerUrl": "http://pulsar-broker:8080"}})


def _notes(values: dict[str, Any] | None) -> str:
    with helm.Chart.load(CHART) as chart:
        return chart.render(values, name="ld", namespace="pulsar")["ledger-deletion/templates/NOTES.txt"]


def test_notes_and_lint() -> None:
    notes = _notes(ALL_ON)
    assert "DRY RUN" in notes and "ENQUEUES" in notes and "ld-ledger-deletion" in notes
    report = helm.lint(str(CHART), strict=True)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_the_toml_is_toml(defaults: dict[str, dict]) -> None:
    assert tomllib.loads(defaults["ConfigMap"]["data"]["ledger-deletion.toml"])["clusterName"] == "pulsar"


# The data dir (and the audit trail in it): a claim per replica by default, an emptyDir when persistence is off.


def test_by_default_each_replica_keeps_its_data_dir_on_its_own_claim(defaults: dict[str, dict]) -> None:
    assert "Deployment" not in defaults
    spec = defaults["StatefulSet"]["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == defaults["Service"]["metadata"]["name"]  # the Service exists, in the same release
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    claim = _claim(defaults)
    assert claim["metadata"]["name"] == "data" and "annotations" not in claim["metadata"]
    # no storageClassName at all: the cluster's default StorageClass
    assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}}
    # the claim is the data volume: no emptyDir (or any other volume) named data is left in the pod template
    assert "data" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}


def test_the_claim_template_takes_every_persistence_value(all_on: dict[str, dict]) -> None:
    claim = _claim(all_on)
    assert claim["metadata"]["annotations"] == {"audit.example.com/retain": "7y"}
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOncePod"],
        "storageClassName": "fast-ssd",
        "resources": {"requests": {"storage": "20Gi"}},
    }


def test_the_claim_template_has_only_labels_an_upgrade_keeps(defaults: dict[str, dict]) -> None:
    # the API server refuses any change to volumeClaimTemplates: a chart or app version label there would make
    # the next chart version's upgrade fail
    assert _claim(defaults)["metadata"]["labels"] == defaults["StatefulSet"]["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(
    ("storage_class", "rendered"),
    [("fast-ssd", "fast-ssd"), ("-", ""), ("", None)],
    ids=["named", "dash-means-empty", "unset-means-default"],
)
def test_the_storage_class(storage_class: str, rendered: str | None) -> None:
    objects = render({"daemon": {"persistence": {"storageClassName": storage_class}}})
    spec = _claim(objects)["spec"]
    assert ("storageClassName" in spec) == (rendered is not None)
    assert spec.get("storageClassName") == rendered
    _validate_strictly(objects)


def test_persistence_off_is_the_deployment_with_an_emptydir(
    emptydir: dict[str, dict], defaults: dict[str, dict]
) -> None:
    assert "StatefulSet" not in emptydir
    template = emptydir["Deployment"]["spec"]["template"]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}
    # one pod template for both kinds: they differ by the data volume alone
    without_data = copy.deepcopy(template)
    without_data["spec"]["volumes"] = [v for v in without_data["spec"]["volumes"] if v["name"] != "data"]
    assert without_data == defaults["StatefulSet"]["spec"]["template"]
    assert emptydir["Deployment"]["spec"]["selector"] == defaults["StatefulSet"]["spec"]["selector"]


@pytest.mark.parametrize("which", ["defaults", "emptydir"])
def test_the_daemon_mounts_data_at_its_data_dir_and_the_scan_keeps_scratch(
    which: str, request: pytest.FixtureRequest
) -> None:
    objects = request.getfixturevalue(which)
    for pod in (_daemon(objects), _scan(objects)):
        container = pod["containers"][0]
        assert container["args"][container["args"].index("--data-dir") + 1] == DATA_DIR
        assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["data"] == DATA_DIR
    daemon_volumes = {v["name"]: v for v in _daemon(objects)["volumes"]}
    if which == "defaults":
        assert "data" not in daemon_volumes and _claim(objects)["metadata"]["name"] == "data"
    else:
        assert daemon_volumes["data"] == {"name": "data", "emptyDir": {}}
    assert {v["name"]: v for v in _scan(objects)["volumes"]}["data"] == {"name": "data", "emptyDir": {}}


@pytest.mark.parametrize("which", ["all_on", "all_on_emptydir"])
def test_the_pdb_service_and_monitor_select_the_daemons_pods_and_only_them(
    which: str, request: pytest.FixtureRequest
) -> None:
    objects = request.getfixturevalue(which)
    workload = _workload(objects)
    pods = workload["spec"]["template"]["metadata"]["labels"]
    scan_pods = _scan_template(objects)["metadata"]["labels"]
    service = objects["Service"]
    selectors = {
        "workload": workload["spec"]["selector"]["matchLabels"],
        "PodDisruptionBudget": objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        "Service": service["spec"]["selector"],
    }
    for name, selector in selectors.items():
        assert selector.items() <= pods.items(), name
        assert not selector.items() <= scan_pods.items(), name
    assert objects["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    if workload["kind"] == "StatefulSet":
        assert workload["spec"]["serviceName"] == service["metadata"]["name"]


@pytest.mark.parametrize(
    ("persistence", "refused"),
    [
        ({"size": 5}, "/daemon/persistence/size"),
        ({"size": "5 GB"}, "/daemon/persistence/size"),
        ({"sizee": "5Gi"}, "'sizee' not allowed"),
        ({"enabled": "yes"}, "/daemon/persistence/enabled"),
        ({"accessModes": ["ReadOnlyMany"]}, "/daemon/persistence/accessModes"),
        ({"accessModes": []}, "/daemon/persistence/accessModes"),
        ({"storageClassName": "Fast SSD"}, "/daemon/persistence/storageClassName"),
        ({"annotations": {"retain": 7}}, "/daemon/persistence/annotations"),
    ],
)
def test_the_schema_refuses_bad_persistence_values(persistence: dict[str, Any], refused: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=refused):
        render({"daemon": {"persistence": persistence}})


def test_the_notes_say_where_the_audit_trail_lives_and_warn_without_persistence() -> None:
    kept, lost = _notes(None), _notes(_emptydir({}))
    for notes in (kept, lost):
        assert f"{DATA_DIR}/audit/audit-<n>.jsonl" in notes
    assert "data-ld-ledger-deletion-<ordinal>" in kept and f"--data-dir {DATA_DIR} audit verify" in kept
    assert "WARNING" not in kept
    assert "WARNING" in lost and "LOST AT EVERY POD RESTART" in lost and "-AUDIT" not in lost
    with_copy = _notes(_emptydir({"config": {"ledgerDeletionAuditTopicEnabled": True}}))
    assert "LOST AT EVERY POD RESTART" in with_copy and "__ledger_deletion-AUDIT" in with_copy
