"""Tenant and entity ids: what a key may hold."""

from __future__ import annotations

import re

from api.domain.errors import BadUserInput

# 1-64 characters of [A-Za-z0-9_.:-], starting with a letter or digit, so that
# keys such as `T#<tenant>#LOG` stay unambiguous (`api.storage.keys`).
IDENTIFIER = _IDENTIFIER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
# A type whose ids are its members' token subjects (Member, contract 6): what
# identity providers put in `sub` (Auth0's `auth0|5f7c...`, `google-oauth2|123`,
# `samlp|acme|ann@example.com`; Cognito's and Keycloak's UUIDs; base64url or
# URI subjects), 1-256 characters of [A-Za-z0-9_.:@|+=/-], starting with a letter or
# digit: never '#', the keys' separator (a version's key is `<id>#<token>`), nor
# whitespace or controls. Every IDENTIFIER is one.
SUBJECT_MAX = 256
_SUBJECT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@|+=/-]{0,255}$")


def check_identifier(value: str, what: str) -> str:
    """`value` when it is a valid tenant or entity id, else BadUserInput naming `what`."""
    if not isinstance(value, str) or not _IDENTIFIER_RE.fullmatch(value):
        raise BadUserInput(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return value


def check_subject(value: str, what: str) -> str:
    """`value` when it is a valid id of a type named by subjects (a Member's), else
    BadUserInput naming `what`."""
    if not isinstance(value, str) or not _SUBJECT_RE.fullmatch(value):
        raise BadUserInput(
            f"{what} must be 1-{SUBJECT_MAX} characters of letters, digits, "
            "'_', '.', ':', '@', '|', '+', '=', '/' or '-', starting with a letter or digit"
        )
    return value


def check_entity_id(value: str, what: str, subjects: bool = True) -> str:
    """`value` when it is a valid id of an entity: of a type named by subjects
    (`subjects`: any entity's, where the type is not known) or an identifier."""
    return check_subject(value, what) if subjects else check_identifier(value, what)


def is_identifier(value: object) -> bool:
    return isinstance(value, str) and _IDENTIFIER_RE.fullmatch(value) is not None
