"""Tenant and entity ids: what a key may hold."""

from __future__ import annotations

import re

from api.domain.errors import BadUserInput

# 1-64 characters of [A-Za-z0-9_.:-], starting with a letter or digit, so that
# keys such as `T#<tenant>#LOG` stay unambiguous (`api.storage.keys`).
IDENTIFIER = _IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def check_identifier(value: str, what: str) -> str:
    """`value` when it is a valid tenant or entity id, else BadUserInput naming `what`."""
    if not isinstance(value, str) or not _IDENTIFIER_RE.fullmatch(value):
        raise BadUserInput(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return value


def is_identifier(value: object) -> bool:
    return isinstance(value, str) and _IDENTIFIER_RE.fullmatch(value) is not None
