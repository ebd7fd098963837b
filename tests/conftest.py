"""Session-scoped real servers, shared by every test module.

Each fixture starts its server once per test session (lazily: a run that
needs no ZooKeeper starts none), and stops it by PID at the end.  When a test
fails, the servers' log tails are attached to the report.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer

# Hypothesis judges examples, never their speed: a per-example deadline or a "too slow" health check
# is a timed assertion, and it fails on a loaded machine whatever the code does.  Speed is measured
# under bench/, not asserted here.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv's interpreter, never the host's
# Spark's JVMs started by the suite (in-process sessions and `scan-orphans` children alike) read the
# suite's spark-defaults.conf: short-lived JVMs, tuned for their CPU (see the file).
os.environ["SPARK_CONF_DIR"] = str(Path(__file__).parent / "support" / "spark-conf")

_started: list = []


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    _started.append(server)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pulsar_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLiteBroker]:
    broker = PulsarLiteBroker(tmp_path_factory.mktemp("pulsar-lite")).start()
    _started.append(broker)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3Server]:
    server = MotoS3Server(tmp_path_factory.mktemp("moto")).start()
    _started.append(server)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def module_pulsar_lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLiteBroker]:
    """A pulsar-lite process of the module's own, for daemons its tests SIGKILL: pulsar-lite keeps the
    consumers of a connection that ended with a reset, and on the session's broker they would break later
    tests of the same worker (a later subscribe times out)."""
    broker = PulsarLiteBroker(tmp_path_factory.mktemp("module-pulsar-lite")).start()
    yield broker
    broker.stop()


@pytest.fixture
def own_pulsar_lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLiteBroker]:
    """A pulsar-lite process of the test's own, for a test that restarts or wedges its broker (the
    session's is shared by every test of its worker)."""
    broker = PulsarLiteBroker(tmp_path_factory.mktemp("own-pulsar-lite")).start()
    yield broker
    broker.stop()


@pytest.fixture
def zk_url(zookeeper: ZooKeeperServer) -> str:
    """A fresh chroot per test, so tests never see each other's nodes."""
    return f"{zookeeper.url}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'metadata.db'}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for server in _started:
            report.sections.append((f"{server.name} log (tail)", server.log_tail()))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole run (starting one costs seconds): two task slots,
    as the CI machine has two cores, and as many shuffle partitions.  The tests' tables have a few
    hundred rows: the scan's 16 partitions would cost each shuffle 16 tasks for nothing (a third
    of the reconcile tests' time, measured); production scans keep their own setting."""
    from deletion_service.orphans.spark import session

    spark = session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield spark
    spark.stop()


TIERS = ("unit", "integration", "system", "deploy", "soak")


def _own_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture its own module defines (a seeded cluster, a
    Spark cluster): such a fixture is worth setting up once, so its module stays on one worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    return any(d.scope == "module" and d.baseid == module
               for defs in info.name2fixturedefs.values() for d in defs)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked with its tier, the folder under tests/ it lives in (``-m "not soak"``).

    For ``-n`` runs (``--dist loadgroup``): a module whose tests share a module-scoped fixture of
    its own is one ``xdist_group``, and so are all the modules using the session's ``spark`` (its
    JVM costs about 20 s of CPU to start and warm: one worker starts it, not each).  Modules holding
    a ``slow`` or soak test come first, so the longest tests start while the rest fill the other
    workers instead of running alone at the end.
    """
    here = Path(__file__).parent
    slow_modules: set[Path] = set()
    spark_modules = {item.path for item in items if "spark" in getattr(item, "fixturenames", ())}
    for item in items:
        parts = item.path.relative_to(here).parts if item.path.is_relative_to(here) else ()
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])
        if item.path in spark_modules:  # one worker starts the session's Spark JVM, not every worker
            item.add_marker(pytest.mark.xdist_group("spark-session"))
        elif _own_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        if item.get_closest_marker("slow") or item.get_closest_marker("soak"):
            slow_modules.add(item.path)
    # stable: each module keeps its order; the soak, the longest, first of all
    items.sort(key=lambda item: (item.path not in slow_modules, item.get_closest_marker("soak") is None))
