"""JWT bearer authentication and tenant membership (contract 6), with PyJWT.

Two modes, chosen by the settings:
- production (`JWT_JWKS_URL` set): RS256/ES256 tokens verified against the
  issuer's JWKS (keys cached by PyJWKClient, refetched when an unknown `kid`
  appears, so key rotation needs nothing), with issuer, audience and expiry
  checked. Amazon Cognito works: its access tokens carry `client_id` instead
  of `aud`, and a custom attribute arrives as a string claim.
- local: HS256 with `SYNC_AUTH_SECRET`; `scripts/token` makes such tokens.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt.types import Options
from jwt.warnings import InsecureKeyLengthWarning

from api.domain.errors import NotAMember, Unauthenticated, Unavailable
from api.domain.membership import OWNER, ROLES, require
from api.domain.membership import READER as READER  # the roles, as callers import them
from api.domain.membership import WRITER as WRITER
from api.settings import Settings

# The spec's default development secret is shorter than RFC 7518 asks for HS256;
# Settings.check() warns once at start-up instead of PyJWT warning on every request.
warnings.filterwarnings("ignore", category=InsecureKeyLengthWarning)

# Verified tokens kept per process, until they expire: a device sends the same
# token for up to an hour, and verifying it again costs a signature check (RS256:
# about 0.1 ms; with PyJWT's claim checks about 0.3-0.5 ms a request here). 4,096
# tokens of about 1 KB each is 4 MB at most.
VERIFIED_TOKENS = 4096

LOCAL_ALGORITHMS = ["HS256"]
JWKS_ALGORITHMS = ["RS256", "ES256"]


@dataclass(frozen=True)
class Principal:
    """Who is calling, which tenants they belong to, and their role in each."""

    sub: str
    tenants: frozenset[str]
    # When the token stops being accepted (epoch seconds): its `exp` plus
    # JWT_LEEWAY_SECONDS, the one rule for HTTP and for the sockets it opens.
    expires_at: float | None = None
    # Roles other than owner, by tenant (a tenant named without a role: owner).
    roles: Mapping[str, str] = field(default_factory=dict)

    def require_tenant(self, tenant_id: str) -> None:
        # The message names neither the caller's tenants nor whether the tenant exists.
        if tenant_id not in self.tenants:
            raise NotAMember("you do not have access to this tenant")

    def role(self, tenant_id: str) -> str:
        self.require_tenant(tenant_id)
        return self.roles.get(tenant_id, OWNER)

    def require_role(self, tenant_id: str, needed: str) -> None:
        """FORBIDDEN unless the caller's role in the tenant is `needed` or above."""
        require(self.role(tenant_id), needed)


def connection_authorization(params: object) -> str | None:
    """The `Authorization` value a WebSocket client sent in `connection_init`'s
    payload (browsers cannot set headers on a WebSocket); None when there is none."""
    if not isinstance(params, dict):
        return None
    value = params.get("Authorization", params.get("authorization"))
    return value if isinstance(value, str) else None


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._jwks = (
            jwt.PyJWKClient(
                settings.jwt_jwks_url,
                cache_keys=True,
                lifespan=3600,
                timeout=5,
                cooldown_duration=settings.jwt_jwks_cooldown_seconds,
            )
            if settings.jwt_jwks_url
            else None
        )
        # PyJWKClient starts its cooldown only after a successful fetch: after a
        # failed one, every unknown `kid` would wait for another slow fetch.
        self._fetch_retry_at = 0.0
        self._verified: OrderedDict[str, Principal] = OrderedDict()
        self._verified_lock = threading.Lock()

    def known(self, authorization: str | None) -> Principal | None:
        """The principal of a token verified before and still accepted (no work)."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        with self._verified_lock:
            principal = self._verified.get(token.strip())
            if principal is None:
                return None
            if principal.expires_at is not None and principal.expires_at <= time.time():
                del self._verified[token.strip()]
                return None
            self._verified.move_to_end(token.strip())
            return principal

    @property
    def fetches_keys(self) -> bool:
        """Whether authenticating may fetch the issuer's key set over the network."""
        return self._jwks is not None

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization: Bearer <JWT>` header; Unauthenticated otherwise."""
        known = self.known(authorization)
        if known is not None:
            return known
        principal = self._verify(authorization)
        scheme, _, token = (authorization or "").partition(" ")
        with self._verified_lock:
            self._verified[token.strip()] = principal
            if len(self._verified) > VERIFIED_TOKENS:
                self._verified.popitem(last=False)
        return principal

    def _verify(self, authorization: str | None) -> Principal:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("send Authorization: Bearer <token>")
        try:
            claims = self._decode(token)
        except jwt.PyJWKClientConnectionError:
            raise Unavailable(
                "cannot verify tokens right now (key set unreachable); retry"
            ) from None
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid token: {_reason(exc)}") from None
        for name in ("exp", "nbf", "iat"):
            # RFC 7519: NumericDate. PyJWT also accepts a numeric string.
            value = claims.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise Unauthenticated(f"invalid token: {name} must be a number")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthenticated("invalid token: no subject")
        memberships = _memberships(_tenants(claims.get(self._settings.jwt_tenants_claim)))
        return Principal(
            sub=sub,
            tenants=frozenset(memberships),
            expires_at=float(claims["exp"]) + self._settings.jwt_leeway_seconds,
            roles={t: r for t, r in memberships.items() if r != OWNER},
        )

    def _decode(self, token: str) -> dict[str, Any]:
        settings = self._settings
        options: Options = {"require": ["exp", "sub"], "verify_aud": False}
        if self._jwks is None:
            claims: dict[str, Any] = jwt.decode(
                token,
                settings.auth_secret,
                algorithms=LOCAL_ALGORITHMS,
                options=options,
                leeway=settings.jwt_leeway_seconds,
            )
            return claims
        key = self._signing_key(token)
        claims = jwt.decode(
            token,
            key,
            algorithms=JWKS_ALGORITHMS,
            options=options,
            issuer=settings.jwt_issuer,
            leeway=settings.jwt_leeway_seconds,
        )
        if settings.jwt_audience is not None:
            _check_audience(claims, settings.jwt_audience)
        return claims

    def _signing_key(self, token: str) -> jwt.PyJWK:
        """The token's key: from the cached key set, or fetched unless a fetch failed
        less than `JWT_JWKS_COOLDOWN_SECONDS` ago."""
        assert self._jwks is not None
        if time.monotonic() < self._fetch_retry_at:
            kid = jwt.get_unverified_header(token).get("kid")
            cache = self._jwks.jwk_set_cache
            cached = cache.get() if cache is not None else None
            if cached is not None and isinstance(kid, str):
                try:
                    return cached[kid]
                except KeyError:
                    pass
            raise jwt.PyJWKClientConnectionError("key set fetch failed recently")
        try:
            return self._jwks.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError:
            self._fetch_retry_at = time.monotonic() + self._settings.jwt_jwks_cooldown_seconds
            raise


def _check_audience(claims: dict[str, Any], audience: str) -> None:
    # ID tokens carry `aud`; Cognito access tokens carry `client_id` instead.
    aud = claims.get("aud", claims.get("client_id"))
    audiences = [aud] if isinstance(aud, str) else list(aud or [])
    if audience not in audiences:
        raise jwt.InvalidAudienceError("audience does not match")


def _tenants(claim: Any) -> frozenset[str]:
    """A list claim, or a string holding a JSON list or comma-separated ids (Cognito)."""
    if isinstance(claim, str):
        try:
            claim = json.loads(claim) if claim.strip().startswith("[") else claim.split(",")
        except ValueError:
            return frozenset()
    if not isinstance(claim, Iterable) or isinstance(claim, (str, bytes, dict)):
        return frozenset()
    return frozenset(t.strip() for t in claim if isinstance(t, str) and t.strip())


def _memberships(entries: frozenset[str]) -> dict[str, str]:
    """Tenant -> role, from entries "<tenant>" (owner: full access, as before roles)
    or "<tenant>:<owner|writer|reader>". Tenant ids may hold ':' themselves: only a
    last part that names a role is one. A tenant named twice gets the higher role."""
    memberships: dict[str, str] = {}
    for entry in entries:
        tenant, _, role = entry.rpartition(":")
        if not tenant or role not in ROLES:
            tenant, role = entry, OWNER
        held = memberships.get(tenant)
        if held is None or ROLES.index(role) < ROLES.index(held):
            memberships[tenant] = role
    return memberships


def _reason(exc: jwt.PyJWTError) -> str:
    # Say what is wrong without echoing the token or its claims.
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "not yet valid"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "algorithm not allowed"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "bad signature"
    if isinstance(exc, (jwt.InvalidIssuerError, jwt.InvalidAudienceError)):
        return "wrong issuer or audience"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"missing claim {exc.claim}"
    return "malformed or unverifiable"


def make_local_token(
    secret: str, sub: str, tenants: list[str], ttl_seconds: int, now: float | None = None
) -> str:
    """An HS256 token for local use (`scripts/token`) and tests."""
    issued = int(time.time() if now is None else now)
    claims = {"sub": sub, "tenants": tenants, "iat": issued, "exp": issued + ttl_seconds}
    return jwt.encode(claims, secret, algorithm="HS256")
