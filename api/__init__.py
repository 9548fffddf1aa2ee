"""Offline-first GraphQL sync API."""
