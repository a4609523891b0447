"""The versions and sources the roles pin (their defaults/main.yml): bundles follow the roles."""

from __future__ import annotations

from typing import Any

from miner2provider.core.collection import role_defaults


def role_default(role: str, var: str) -> Any:
    return role_defaults(role)[var]


K3S_VERSION = str(role_default("k3s", "k3s_version"))
K3S_RELEASE_URL = str(role_default("k3s", "k3s_release_url"))
TOOLKIT_VERSION = str(role_default("nvidia_container_toolkit", "nvidia_container_toolkit_version"))
TOOLKIT_REPO_URL = str(role_default("nvidia_container_toolkit", "nvidia_container_toolkit_repo_url"))
TOOLKIT_PACKAGES = [str(p) for p in role_default("nvidia_container_toolkit", "nvidia_container_toolkit_packages")]
DEVICE_PLUGIN_IMAGE = str(role_default("nvidia_device_plugin", "nvidia_device_plugin_image"))
# Every image m2p's own manifests name (a bundle must carry each for rigs without internet).
IMAGES = [DEVICE_PLUGIN_IMAGE]
