"""Bearer-token authentication: endpoints that change state, and the log excerpts quoted as evidence.

The token lives in a file (ApiSettings.token_file; a mounted Secret works). It is re-read when the
file changes, so rotating it needs no restart. With no file configured, such endpoints are off (503)
rather than open: an API that someone forgot to protect must not let anyone flip jobs to act.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from fastapi import HTTPException, Request

MIN_TOKEN_CHARS = 16
"""Shorter tokens are refused as configuration errors: guessable tokens are no protection."""


class TokenFile:
    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[float, int] | None = None
        self._token: str | None = None
        self._problem = "no token file is configured (RELAUNCH_API_TOKEN_FILE)"

    def token(self) -> tuple[str | None, str]:
        """(token, "") or (None, why there is none)."""
        if self.path is None:
            return None, self._problem
        try:
            st = os.stat(self.path)
        except OSError as exc:
            return None, f"the token file {self.path} cannot be read: {exc.strerror}"
        stamp = (st.st_mtime, st.st_size)
        if stamp != self._stamp:
            try:
                text = self.path.read_text().strip()
            except OSError as exc:
                return None, f"the token file {self.path} cannot be read: {exc.strerror}"
            self._stamp = stamp
            self._token, self._problem = (text, "") if len(text) >= MIN_TOKEN_CHARS else (
                None, f"the token file {self.path} holds fewer than {MIN_TOKEN_CHARS} characters")
        return self._token, self._problem


def require_token(request: Request) -> None:
    """FastAPI dependency: pass only with `Authorization: Bearer <the token in the file>`."""
    expected, problem = request.app.state.tokens.token()
    if expected is None:
        raise HTTPException(503, detail=f"changing state through the API is turned off: {problem}. "
                                        "Write a random token of 16+ characters to a file readable by the API "
                                        "and set RELAUNCH_API_TOKEN_FILE to its path.")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise HTTPException(401, detail="this endpoint changes state: send 'Authorization: Bearer <token>' with the "
                                        "token from the API's token file", headers={"WWW-Authenticate": "Bearer"})
    # Constant-time comparison: the time taken must not tell how much of a guess was right.
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise HTTPException(401, detail="the bearer token is not the one in the API's token file",
                            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def _bearer(request: Request) -> str:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def evidence_withheld(request: Request) -> str:
    """Why this request may not read the log lines quoted as evidence, or "" when it may.

    A job's log lines can hold what its owner would not show everyone (paths, hostnames, data
    samples, tokens printed by mistake), while the rest of the ledger is safe to read openly. So
    where a token is configured (RELAUNCH_API_TOKEN_FILE), the excerpts go only to requests that
    carry it; without a token configured, reads stay open as before (docs/security.md, "Who sees
    what"). A configured token file that cannot be read withholds them too: closed, not open."""
    if not request.app.state.settings.token_file:
        return ""
    expected, problem = request.app.state.tokens.token()
    if expected is None:
        return f"log excerpts need the API's bearer token, and {problem}"
    given = _bearer(request)
    if not given:
        return "log excerpts need the API's bearer token: send 'Authorization: Bearer <token>'"
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return "log excerpts need the API's bearer token, and the one sent is not it"
    return ""
