#!/usr/bin/env python3
"""Write deploy/openapi.json from the admin app's code (``create_app``).

The committed document is what operators and clients read without running the
daemon; ``tests/test_admin_openapi.py`` fails when it differs from this output,
so run this after changing a route:  python scripts/gen_openapi.py
``--check`` only compares (exit 1 on a difference), for CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deletion_service.admin.app import openapi_document, render_openapi  # noqa: E402

TARGET = ROOT / "deploy" / "openapi.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args(argv)
    text = render_openapi(openapi_document())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python scripts/gen_openapi.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
