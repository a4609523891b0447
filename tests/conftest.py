"""Shared pytest setup."""

from __future__ import annotations
