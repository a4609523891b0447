"""Shared pytest setup."""
