"""The Helm chart rendered by Helm's own engine (helm-python-sdk: Helm's Go SDK, no binary): the chart,
values with every option on, the rendered objects by kind, and the orphan scan's CronJob arguments.
A module importing this one is skipped where helm-python-sdk or kubernetes-validate is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk missing: pip install -e '.[test]'")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "ledger-deletion"
ALL_ON: dict[str, Any] = {
    "config": {
        "twoPhaseDeletionLedgerDeletionParallelism": 6,
        "maxDeletionsPerSecond": 250.5,
        "offloadAllowedBuckets": ["tiered"],
        "offloadAllowedEndpoints": ["https://s3.internal:9000"],
        "managedLedgerOffloadDriver": "aws-s3",
        "clusterName": "east",
    },
    "pulsar": {
        "metadataStore": "zk://zk-0.zk:2181,zk-1.zk:2181/pulsar",
        "bookkeeperMetadataStore": "zk://bk-zk:2181",
        "brokerUrl": "pulsar+ssl://pulsar-broker:6651",
        "webServiceUrl": "https://pulsar-broker:8443",
    },
    "auth": {
        "zookeeperDigest": {"enabled": True, "secretName": "zk-digest"},
        "pulsarToken": {"enabled": True, "secretName": "pulsar-token"},
        "tls": {"enabled": True, "secretName": "pulsar-ca"},
        "s3": {"enabled": True, "secretName": "s3-creds"},
    },
    "daemon": {
        "dryRun": True,
        "extraArgs": ["--debug"],
        "persistence": {
            "size": "20Gi",
            "storageClassName": "fast-ssd",
            "accessModes": ["ReadWriteOncePod"],
            "annotations": {"audit.example.com/retain": "7y"},
        },
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "podAnnotations": {"a": "b"},
        "nodeSelector": {"pool": "ops"},
        "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "ops-critical",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "ledger-deletion"}},
            }
        ],
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "service": {"annotations": {"x": "y"}},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/ld"}},
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "scanOrphans": {
        "enqueue": True,
        "pushgateway": "http://pushgateway.monitoring:9091",
        "sparkMaster": "spark://spark-master:7077",
        "minAge": "2d",
        "extraArgs": ["--spark-conf", "spark.sql.shuffle.partitions=64"],  # --output would clash with the reports dir
    },
}


def render(values: dict[str, Any] | None = None) -> dict[str, dict]:
    """kind → the one object of that kind (the chart renders at most one of each)."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="ld", namespace="pulsar", is_install=True)
    objects: dict[str, dict] = {}
    for name, text in rendered.items():
        if name.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                assert doc["kind"] not in objects, f"two {doc['kind']}s"
                objects[doc["kind"]] = doc
    return objects


REPORTS_DIR = "/var/lib/ledger-deletion/reports"


def scan_pod(objects: dict[str, dict]) -> dict:
    return objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def scan_args(values: dict[str, Any] | None = None) -> list[str]:
    """The CronJob's ``scan-orphans`` arguments (after the subcommand), as the chart renders them."""
    args = scan_pod(render(values))["containers"][0]["args"]
    return args[args.index("scan-orphans") + 1:]
