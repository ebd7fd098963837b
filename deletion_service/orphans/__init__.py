"""The orphan-ledger scan (``scan-orphans``): inventories as Spark jobs, reconciliation in Spark, outputs.

Flow, one module per step:

* :mod:`.schemas` — the columns of every table (inventories and results), shared by all steps;
* :mod:`.spark` — a SparkSession the way its users run it (``local[*]`` or ``--spark-master``, quiet);
* :mod:`.inventory` — three Spark jobs: BookKeeper's ledgers, Pulsar's references, tiered-storage objects;
* :mod:`.snapshot` — the inventories as Parquet (``--snapshot DIR``), to repeat a scan offline;
* :mod:`.reconcile` — orphan ledgers, orphan offloaded objects, missing ledgers (no driver-side collect);
* :mod:`.report` — a self-contained ``report.html`` with charts;
* :mod:`.requests` — orphans → ``reason: orphan`` requests through the mark phase's producer half;
* :mod:`.scan` — the whole scan, as the CLI runs it.

Safe next to live brokers: everything here only reads metadata and storage; the
delete phase re-verifies every request it sends.
"""
