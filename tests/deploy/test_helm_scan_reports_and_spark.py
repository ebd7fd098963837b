"""The scan's reports are kept on a claim that outlives the pod,
and Spark's settings reach the CLI.  Rendered by Helm's own engine (as tests/deploy/test_helm_chart.py),
validated against the Kubernetes schemas, and the arguments parsed by the real CLI; the cluster
test (tests/system/orphan_scan/test_standalone_spark_cluster.py) runs a scan with exactly these arguments."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.support.helm_chart import REPORTS_DIR, helm, kubernetes_validate, render, scan_args, scan_pod

KUBE_VERSION = "1.29"


def _pairs(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == option]


def test_by_default_each_scan_keeps_its_reports_on_a_claim_and_the_driver_gets_memory() -> None:
    objects = render()
    pod = scan_pod(objects)
    args = pod["containers"][0]["args"]
    assert _pairs(args, "--reports-dir") == [REPORTS_DIR] and _pairs(args, "--keep-reports") == ["14"]
    assert "--output" not in args
    assert _pairs(args, "--spark-conf") == ["spark.driver.memory=2g"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["reports"] == REPORTS_DIR
    claim = objects["PersistentVolumeClaim"]
    assert volumes["reports"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # uninstall keeps the record
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    for obj in (claim, objects["CronJob"]):
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_spark_settings_an_existing_claim_and_reports_off() -> None:
    values = {"scanOrphans": {"driverMemory": "3g", "sparkConf": {"spark.sql.shuffle.partitions": "64",
                                                                  "spark.executor.memory": "4g"},
                              "reports": {"existingClaim": "scan-reports", "keep": 30,
                                          "storageClassName": "-"}}}
    objects = render(values)
    args = scan_pod(objects)["containers"][0]["args"]
    assert _pairs(args, "--spark-conf") == ["spark.driver.memory=3g", "spark.executor.memory=4g",
                                            "spark.sql.shuffle.partitions=64"]
    assert _pairs(args, "--keep-reports") == ["30"]
    assert "PersistentVolumeClaim" not in objects  # the operator's own claim, not ours
    volumes = {v["name"]: v for v in scan_pod(objects)["volumes"]}
    assert volumes["reports"]["persistentVolumeClaim"]["claimName"] == "scan-reports"

    off = render({"scanOrphans": {"reports": {"enabled": False}, "driverMemory": ""}})
    off_args = scan_pod(off)["containers"][0]["args"]
    assert "--reports-dir" not in off_args and "--spark-conf" not in off_args
    assert "reports" not in {v["name"] for v in scan_pod(off)["volumes"]} and "PersistentVolumeClaim" not in off


@pytest.mark.parametrize("scan,refused", [({"driverMemory": "2 GB"}, "driverMemory"),
                                          ({"sparkConf": {"spark.driver.cores": 2}}, "sparkConf"),
                                          ({"reports": {"keep": 0}}, "keep"),
                                          ({"reports": {"sizee": "1Gi"}}, "sizee")])
def test_the_schema_refuses_bad_scan_values(scan: dict[str, Any], refused: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=refused):
        render({"scanOrphans": scan})


def test_the_cli_accepts_the_rendered_scan_arguments() -> None:
    args = scan_args({"scanOrphans": {"sparkConf": {"spark.sql.shuffle.partitions": "8"}}})
    done = subprocess.run([sys.executable, "-m", "deletion_service.cli.main", "scan-orphans", *args, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_with_a_spark_master_the_driver_is_reachable_by_the_pods_ip() -> None:
    """In local mode the driver binds to loopback; a cluster's executors must reach it by the pod's IP."""
    local = scan_pod(render())["containers"][0]
    assert {"name": "SPARK_LOCAL_IP", "value": "127.0.0.1"} in local["env"]
    assert "spark.driver.host=$(POD_IP)" not in local["args"]
    remote = scan_pod(render({"scanOrphans": {"sparkMaster": "spark://spark-master:7077"}}))["containers"][0]
    env = {e["name"]: e for e in remote["env"]}
    assert "SPARK_LOCAL_IP" not in env and env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert {"spark.driver.host=$(POD_IP)", "spark.driver.bindAddress=0.0.0.0"} <= set(_pairs(remote["args"],
                                                                                             "--spark-conf"))
