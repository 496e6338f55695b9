"""API keys: which keys are usable, and the dependency that checks one on every API route."""

from __future__ import annotations

import hmac
import re

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from reelsearch.errors import ConfigError

#: Cookie the page sets so that <img> and <video> requests carry the API key (GET and HEAD only).
KEY_COOKIE = "reelsearch_key"
#: Environment variable read by ``reelsearch serve`` when ``--api-key`` is not given.
API_KEY_ENV = "REELSEARCH_API_KEY"
MIN_KEY_CHARS = 16
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]+")


def check_api_key(key: str) -> str:
    """``key`` when usable as an API key, else ConfigError: at least MIN_KEY_CHARS letters, digits or ``-._~+/=``
    (the characters of base64 and URL-safe tokens, which a header and a cookie carry as they are)."""
    if len(key) < MIN_KEY_CHARS or not _KEY_CHARS.fullmatch(key):
        raise ConfigError(f"the API key must be at least {MIN_KEY_CHARS} characters among letters, digits and "
                          "-._~+/= (make one with: python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    return key


def key_checker(key: str):
    """A dependency that accepts ``key`` from the X-API-Key header, a Bearer token or (GET/HEAD) the page's cookie."""
    header = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="apiKey",
                          description="The key given to `reelsearch serve --api-key` (or REELSEARCH_API_KEY).")
    bearer = HTTPBearer(auto_error=False, scheme_name="bearer", description="The same key as a Bearer token.")
    cookie = APIKeyCookie(name=KEY_COOKIE, auto_error=False, scheme_name="cookie",
                          description="The same key in the page's cookie; accepted for GET and HEAD only.")
    expected = check_api_key(key).encode()

    def check(request: Request, from_header: str | None = Security(header),
              from_bearer: HTTPAuthorizationCredentials | None = Security(bearer),
              from_cookie: str | None = Security(cookie)) -> None:
        given = from_header or (from_bearer.credentials if from_bearer else None)
        if given is None and request.method in ("GET", "HEAD"):
            given = from_cookie
        # constant-time comparison; header values arrive as latin-1 text, so any byte round-trips
        if given is None or not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected):
            raise HTTPException(401, "missing or wrong API key (send it as X-API-Key or Authorization: Bearer)",
                                headers={"WWW-Authenticate": "Bearer"})

    return check
