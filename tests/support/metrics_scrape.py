"""A running daemon's ``/metrics``: one scrape over HTTP, and one sample's value read from it."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families


def metric(text: str, name: str) -> float | None:
    """The value of the sample ``name`` in a scrape (``acked_total{outcome="dlq"}``: name and labels), or
    None when it has none.  Every exported sample also carries ``cluster`` (tested on its own); a lookup
    names the labels it is about, so ``cluster`` is not compared here."""
    wanted, _, labels = name.partition("{")
    want = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == wanted and {k: v for k, v in sample.labels.items() if k != "cluster"} == want:
                return sample.value
    return None


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels`` (0 when there is none): a
    family's total over the labels a lookup does not name (``held`` over every reason).  Read line by
    line, so any exposition serves (a broker's too)."""
    return sum(float(value) for _, value in _samples(text, name, labels))


def label_values(text: str, name: str, label: str, **labels: str) -> set[str]:
    """The values ``label`` takes among the samples of ``name`` whose labels include ``labels``: the
    subscriptions a broker lists for one topic, say."""
    return {have[label] for have, _ in _samples(text, name, labels) if label in have}


def _samples(text: str, name: str, labels: dict[str, str]) -> Iterator[tuple[dict[str, str], str]]:
    """Each sample of ``name`` whose labels include ``labels``: its labels and its value as written."""
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            yield have, m.group(2)


def scrape(port: int) -> str:
    """The daemon's ``/metrics`` on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()
