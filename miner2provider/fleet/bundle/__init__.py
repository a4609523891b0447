"""Offline bundles: everything convert installs, downloaded once, checked by sha256."""
