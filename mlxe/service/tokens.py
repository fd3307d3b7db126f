"""The bearer-token guard every HTTP app of a run shares (the run service, serve-policy, the remote
simulators): each serves only requests that carry ``Authorization: Bearer <token>``."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import JSONResponse


def refusal(request: Request, expected: bytes, token_file: str, **headers: str) -> JSONResponse | None:
    """None where ``request`` carries the token ``expected``; else the 401 answer, naming the run
    directory's file the token is in (``token_file``), with ``headers`` added."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), expected):
        return None
    return JSONResponse(
        {"error": f"a valid 'Authorization: Bearer <token>' header is required (the token is in the run directory's {token_file})"},
        status_code=401, headers={"WWW-Authenticate": "Bearer", **headers},
    )
