"""A running daemon's ``/metrics``: one scrape over HTTP, and one sample's value read from it."""

from __future__ import annotations

import re
import urllib.request


def metric(text: str, name: str) -> float | None:
    """The value of the sample ``name`` (labels included) in a scrape, or None when it has none."""
    found = re.search(rf"^{name} (\S+)$", text, flags=re.M)
    return float(found.group(1)) if found else None


def scrape(port: int) -> str:
    """The daemon's ``/metrics`` on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()
