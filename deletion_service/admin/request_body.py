"""Reading the body of ``POST …/delete`` by hand: capped in size, JSON Schema's numbers, encodable names.

The route does not let FastAPI validate the body: the contract answers 400 for
an invalid payload, while FastAPI's automatic validation answers 422, which
this API reserves for "metadata mismatch".  So the checks FastAPI would have
made live here, each raising ``InvalidRequest`` (400) or ``HTTPException``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException

from deletion_service.protocol.request import DeleteLedgerPayload, InvalidRequest


async def read_capped(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes before reading them when the length is declared."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413 if declared.isdigit() else 400,
                            f"request body over {limit} bytes" if declared.isdigit() else "invalid Content-Length")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_body(body: bytes) -> Any:
    """Parse with JSON Schema's number semantics, which the OpenAPI document promises: ``5.0`` is an
    integer there (and in Jackson, which Pulsar's Java tools use), while ``DeleteLedgerPayload``'s
    strict ints would refuse the float.  Integral numbers become ints; NaN and Infinity are not JSON."""

    def number(text: str) -> int | float:
        value = Decimal(text)
        # adjusted() bounds the digits: int(Decimal("1e999999999")) would build a billion-digit number
        if value.adjusted() <= 20 and value == value.to_integral_value():
            return int(value)
        return float(text)

    def constant(text: str) -> Any:
        raise InvalidRequest(f"payload is not JSON: {text} is not a JSON number")

    try:
        return json.loads(body.decode("utf-8"), parse_float=number, parse_constant=constant)
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"payload is not UTF-8 (byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"payload is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except ValueError as e:  # e.g. an integer literal over Python's 4300-digit conversion limit
        raise InvalidRequest(f"payload is not usable JSON: {e}") from e


def check_text(payload: DeleteLedgerPayload) -> None:
    """JSON can carry lone surrogates (``"\\ud800"``); such names can never be encoded into a metadata path."""
    for name in ("topic_name", "cursor_name", "schema_id"):
        value = getattr(payload, name)
        try:
            (value or "").encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidRequest(f"{name}: not valid Unicode text (lone surrogate at {e.start})") from e
