"""Who may connect: API keys, short-lived signed tokens for browsers, an origin allow-list, and
session limits. Every refusal happens before any engine work is allocated.

- API keys (config `api_keys` or the env `VOICEWIRE_API_KEYS`, comma-separated) go in
  `Authorization: Bearer KEY`.
- `POST /v1/tokens` (with a key) mints a token signed with itsdangerous, valid `token_ttl_s`. A
  browser passes it on the WebSocket as `?token=...` or as a subprotocol entry
  `voicewire.token.<token>` next to the real subprotocol; HTTP takes it as a Bearer too.
- With no keys configured the server is open, and the CLI keeps it on loopback.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import secrets
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from voicewire.server.config import ServerConfig
from voicewire.server.errors import ProtocolError

TOKEN_PREFIX = "voicewire.token."
ANONYMOUS = "anonymous"

# What `mint` makes: itsdangerous's payload.timestamp.signature, each part URL-safe base64 (a
# compressed payload leads with '.'). A Bearer credential of any other shape is taken for a key.
_TOKEN_SHAPE = re.compile(r"\.?[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def key_id(key: str) -> str:
    """A key's name in logs and limits; the key itself is never logged."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Caller:
    """Who a request or socket acts for, established once by `Auth.identify` and passed on from
    there (to the session limits, the voice library's verbs and a socket's voice resolution)."""

    identity: str  # key_id() of the caller's key (a browser token acts for its key), or ANONYMOUS


ANONYMOUS_CALLER = Caller(ANONYMOUS)  # every caller of a server without keys


class Auth:
    def __init__(self, config: ServerConfig) -> None:
        keys = list(config.api_keys)
        keys += [k.strip() for k in os.environ.get("VOICEWIRE_API_KEYS", "").split(",") if k.strip()]
        self._keys = {key_id(k): k for k in keys}
        self.config = config
        secret = config.token_secret or secrets.token_hex(32)  # per process: tokens die with it
        self._tokens = URLSafeTimedSerializer(secret, salt="voicewire.v1.token")
        self._sessions: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return not self._keys

    def mint(self, caller: Caller) -> str:
        return self._tokens.dumps({"k": caller.identity})

    def _check_key(self, key: str) -> str | None:
        for identity, known in self._keys.items():
            if secrets.compare_digest(known, key):
                return identity
        return None

    def _check_token(self, token: str) -> str:
        try:
            # Ages are whole seconds, so `age > floor(ttl)` is `age > ttl`: the same limit, as an int.
            payload = self._tokens.loads(token, max_age=math.floor(self.config.token_ttl_s))
        except SignatureExpired:
            raise ProtocolError(
                "unauthorized", "the token has expired; mint a new one with POST /v1/tokens"
            ) from None
        except BadSignature:
            raise ProtocolError(
                "unauthorized", "the token is not valid: this server did not mint it, or it was altered"
            ) from None
        identity = payload.get("k") if isinstance(payload, dict) else None
        if identity not in self._keys:
            raise ProtocolError("unauthorized", "the token's key is no longer accepted")
        return identity

    def identify(
        self, headers: Mapping[str, str], token: str | None = None, tokens_allowed: bool = True
    ) -> Caller:
        """The caller, from a Bearer key or token, or a token given apart; raises
        ProtocolError(unauthorized | forbidden_origin)."""
        origin = headers.get("origin")
        if origin is not None and self.config.allowed_origins and origin not in self.config.allowed_origins:
            raise ProtocolError("forbidden_origin", f"origin {origin!r} is not allowed")
        if self.open:
            return ANONYMOUS_CALLER
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            credential = bearer[7:].strip()
            identity = self._check_key(credential)
            if identity is not None:
                return Caller(identity)
            # Say which was wrong, the key or the token, and nothing of the keys there are.
            if not _TOKEN_SHAPE.fullmatch(credential):
                raise ProtocolError("unauthorized", "the API key is not valid")
            if not tokens_allowed:
                raise ProtocolError("unauthorized", "this needs an API key; a token is not accepted here")
            return Caller(self._check_token(credential))
        if token and tokens_allowed:
            return Caller(self._check_token(token))
        raise ProtocolError("unauthorized", "no credentials: send Authorization: Bearer KEY, or a token")

    def acquire(self, caller: Caller) -> None:
        """Count a session against the limits; raises ProtocolError(too_many_sessions)."""
        identity = caller.identity
        with self._lock:
            if sum(self._sessions.values()) >= self.config.max_sessions:
                raise ProtocolError(
                    "too_many_sessions", f"the server holds {self.config.max_sessions} sessions already"
                )
            if identity != ANONYMOUS and self._sessions[identity] >= self.config.max_sessions_per_key:
                raise ProtocolError(
                    "too_many_sessions", f"this key holds {self.config.max_sessions_per_key} sessions already"
                )
            self._sessions[identity] += 1

    def release(self, caller: Caller) -> None:
        identity = caller.identity
        with self._lock:
            self._sessions[identity] -= 1
            if self._sessions[identity] <= 0:
                del self._sessions[identity]


def split_subprotocols(offered: list[str]) -> tuple[list[str], str | None]:
    """(the real subprotocols offered, a token carried as `voicewire.token.<token>`)."""
    token = next((s[len(TOKEN_PREFIX) :] for s in offered if s.startswith(TOKEN_PREFIX)), None)
    return [s for s in offered if not s.startswith(TOKEN_PREFIX)], token
