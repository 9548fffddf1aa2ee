"""`scripts/token`: print a local HS256 token signed with SYNC_AUTH_SECRET."""

from __future__ import annotations

import argparse
import re
import sys

from api.auth import make_local_token
from api.settings import Settings

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(value: str) -> int:
    match = re.fullmatch(r"(\d+)([smhd]?)", value.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError("ttl must look like 3600, 90m, 24h or 7d")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a local bearer token (HS256).")
    parser.add_argument("--sub", required=True, help="the caller's user id")
    parser.add_argument(
        "--tenant",
        action="append",
        default=[],
        help="a tenant id, or <tenant>:<owner|writer|reader> (repeatable)",
    )
    parser.add_argument("--ttl", type=parse_ttl, default="24h", help="lifetime (default 24h)")
    args = parser.parse_args(argv)
    if not args.tenant:
        parser.error("give at least one --tenant")
    settings = Settings.from_env()
    if settings.jwt_jwks_url:
        parser.error("JWT_JWKS_URL is set: tokens come from the issuer, not from this script")
    print(make_local_token(settings.auth_secret, args.sub, args.tenant, args.ttl))
    return 0


if __name__ == "__main__":
    sys.exit(main())
