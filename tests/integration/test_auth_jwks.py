"""Production mode: RS256/ES256 tokens verified against a JWKS served locally."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.testclient import TestClient

from api.app import create_app
from api.settings import Settings

ISSUER = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_TEST"
AUDIENCE = "app-client-id"


class _Jwks:
    """A JWKS endpoint whose key set the test can rotate."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.fetches = 0

    def add(self, kid: str, private_key: Any) -> None:
        algorithm = (
            jwt.algorithms.RSAAlgorithm
            if isinstance(private_key, rsa.RSAPrivateKey)
            else jwt.algorithms.ECAlgorithm
        )
        jwk = json.loads(algorithm.to_jwk(private_key.public_key()))
        self.keys[kid] = {**jwk, "kid": kid, "use": "sig"}


@pytest.fixture(scope="module")
def jwks() -> Iterator[tuple[_Jwks, str]]:
    state = _Jwks()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            state.fetches += 1
            body = json.dumps({"keys": list(state.keys.values())}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def client(settings: Settings, jwks: tuple[_Jwks, str]) -> Iterator[TestClient]:
    production = dataclasses.replace(
        settings,
        jwt_jwks_url=jwks[1],
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_jwks_cooldown_seconds=0,  # every test publishes new keys at once
    )
    with TestClient(create_app(production)) as test_client:
        yield test_client


def _token(key: Any, kid: str, algorithm: str = "RS256", **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "sub": "u1",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": now + 600,
        "iat": now,
        "tenants": ["jwks-tenant"],
        **claims,
    }
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _code(client: TestClient, token: str, tenant: str = "jwks-tenant") -> str | None:
    response = client.post(
        "/graphql",
        json={
            "query": "query($t: ID!) { changes(tenantID: $t) { changeToken } }",
            "variables": {"t": tenant},
        },
        headers={"Authorization": f"Bearer {token}"},
    )
    body = response.json()
    return body["errors"][0]["extensions"]["code"] if body.get("errors") else None


def test_rs256_and_es256_tokens_from_the_jwks_are_accepted(
    client: TestClient, jwks: tuple[_Jwks, str]
) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks[0].add("rsa-1", rsa_key)
    jwks[0].add("ec-1", ec_key)
    assert _code(client, _token(rsa_key, "rsa-1")) is None
    assert _code(client, _token(ec_key, "ec-1", algorithm="ES256")) is None
    assert _code(client, _token(rsa_key, "rsa-1"), tenant="other") == "FORBIDDEN"


def test_a_rotated_key_is_fetched_when_its_kid_first_appears(
    client: TestClient, jwks: tuple[_Jwks, str]
) -> None:
    old = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add("old", old)
    assert _code(client, _token(old, "old")) is None
    fetches = jwks[0].fetches
    new = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add("new", new)
    assert _code(client, _token(new, "new")) is None
    assert jwks[0].fetches == fetches + 1


def test_cognito_access_tokens_with_client_id_and_string_tenants(
    client: TestClient, jwks: tuple[_Jwks, str]
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add("cognito", key)
    now = int(time.time())
    access = jwt.encode(
        {
            "sub": "u2",
            "iss": ISSUER,
            "client_id": AUDIENCE,
            "token_use": "access",
            "exp": now + 600,
            "tenants": "jwks-tenant,other",
        },
        key,
        algorithm="RS256",
        headers={"kid": "cognito"},
    )
    assert _code(client, access) is None
    assert _code(client, access, tenant="other") is None


@pytest.mark.parametrize(
    ("case", "claims"),
    [
        ("wrong issuer", {"iss": "https://evil.example"}),
        ("wrong audience", {"aud": "someone-else"}),
        # Times as offsets from the test's own start (collection may be minutes earlier).
        ("expired", {"exp": -600}),
        ("not yet valid", {"nbf": 600}),
    ],
)
def test_bad_claims_are_unauthenticated(
    client: TestClient, jwks: tuple[_Jwks, str], case: str, claims: dict[str, Any]
) -> None:
    now = int(time.time())
    claims = {k: now + v if k in ("exp", "nbf") else v for k, v in claims.items()}
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add(f"k-{case}", key)
    assert _code(client, _token(key, f"k-{case}", **claims)) == "UNAUTHENTICATED"


def test_unknown_keys_and_algorithm_confusion_are_unauthenticated(
    client: TestClient, jwks: tuple[_Jwks, str]
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert _code(client, _token(stranger, "never-published")) == "UNAUTHENTICATED"
    known = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add("known", known)
    assert _code(client, _token(stranger, "known")) == "UNAUTHENTICATED"  # wrong signature
    # HS256 signed with the public key: the classic confusion attack (built by hand,
    # since PyJWT itself refuses to sign HS256 with a PEM key).
    public_pem = known.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "known"}).encode())
    payload = _b64(
        json.dumps(
            {
                "sub": "m",
                "iss": ISSUER,
                "aud": AUDIENCE,
                "exp": now + 60,
                "tenants": ["jwks-tenant"],
            }
        ).encode()
    )
    signature = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert _code(client, f"{header}.{payload}.{_b64(signature)}") == "UNAUTHENTICATED"
    # An HS256 token with the local secret is refused in production mode.
    local = jwt.encode(
        {"sub": "m", "exp": now + 60, "tenants": ["jwks-tenant"]},
        "dev-secret-change-me-but-long-enough-for-hs256!!",
        algorithm="HS256",
    )
    assert _code(client, local) == "UNAUTHENTICATED"


def test_made_up_key_ids_do_not_hammer_the_issuer(
    settings: Settings, jwks: tuple[_Jwks, str]
) -> None:
    production = dataclasses.replace(
        settings, jwt_jwks_url=jwks[1], jwt_issuer=ISSUER, jwt_audience=AUDIENCE
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks[0].add("flood-base", key)
    with TestClient(create_app(production)) as fresh:
        assert _code(fresh, _token(key, "flood-base")) is None
        fetches = jwks[0].fetches
        for i in range(20):
            assert _code(fresh, _token(key, f"made-up-{i}")) == "UNAUTHENTICATED"
        assert jwks[0].fetches == fetches  # within the cooldown: no refetch at all
