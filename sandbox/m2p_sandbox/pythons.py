"""Old python3s on sandbox rigs: the interpreters real mining images carry.

HiveOS stable images: 0.6-222 on Ubuntu 18.04 (python3 3.6), 0.6-227 on 20.04 (3.8), 0.6-229 on
22.04 (3.10) (shared/reference/mining-os.md §1.1).  The rigs' base is Debian bookworm, whose
python3 is 3.11.  A rig booted with ``python=("3.8",)`` gets one more read-only overlay layer,
built once per version list and cached beside the base:

- pyenv's build of that version (this machine's ``/root/.pyenv/versions/3.8.*``), copied at the
  same absolute path (its binary finds libpython through an absolute RUNPATH), without its test
  suite, site-packages, build config, IDLE, tkinter and pip's wheels;
- ``/usr/bin/python3`` pointing at it, and overlayfs whiteouts over bookworm's own
  ``/usr/bin/python3.*``, so neither Ansible's interpreter discovery (which tries python3.13 ...
  python3.8 before /usr/bin/python3) nor anything else on the rig can find a newer Python.

Versions after the first are installed beside it, under ``/opt/python<X.Y>/bin/python3`` and off
``PATH``, as by an owner who built a newer one (what ``m2p_python_interpreter`` is for).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
from pathlib import Path

from miner2provider.errors import SandboxError

# Left out of the copy: not needed to run Ansible's modules or m2p's agent, and 150 MB of 190.
LEFT_OUT = ("test", "site-packages", "config-*", "ensurepip", "idlelib", "tkinter", "turtledemo",
            "lib2to3", "__pycache__", "include", "share", "pkgconfig")
LAYER_FORMAT = 1


def versions_dir() -> Path:
    return Path(os.environ.get("M2P_SANDBOX_PYENV", "/root/.pyenv/versions"))


def build_of(version: str) -> Path:
    """The newest pyenv build of ``version`` ("3.8" -> /root/.pyenv/versions/3.8.18)."""
    found = sorted(
        (p for p in versions_dir().glob(f"{version}.*") if (p / "bin" / f"python{version}").is_file()),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")],
    )
    if not found:
        raise SandboxError(f"no python {version} build under {versions_dir()} (pyenv's builds; "
                           f"scripts/install checks for them): cannot boot a python{version} rig")
    return found[-1]


def _whiteout(path: Path) -> None:
    """An overlayfs whiteout: this name hides the same name in the layers below."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def _fill(layer: Path, versions: tuple[str, ...], base_rootfs: Path) -> None:
    for version in versions:
        build = build_of(version)
        shutil.copytree(build, layer / build.relative_to("/"), symlinks=True,
                        ignore=shutil.ignore_patterns(*LEFT_OUT))
        (layer / build.relative_to("/") / "lib" / f"python{version}" / "site-packages").mkdir(exist_ok=True)
    first = build_of(versions[0])
    usr_bin = layer / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    for own in sorted(base_rootfs.glob("usr/bin/python3*")):
        _whiteout(usr_bin / own.name)
    for name in ("python3", f"python{versions[0]}"):
        target = usr_bin / name
        if target.exists() or target.is_char_device():
            target.unlink()
        target.symlink_to(first / "bin" / f"python{versions[0]}")
    for version in versions[1:]:
        beside = layer / "opt" / f"python{version}" / "bin"
        beside.mkdir(parents=True)
        (beside / "python3").symlink_to(build_of(version) / "bin" / f"python{version}")


def layer(versions: tuple[str, ...], base_rootfs: Path, cache_dir: Path) -> Path:
    """The cached layer for ``versions`` (built now if needed); safe from parallel workers."""
    recipe = [LAYER_FORMAT, *[str(build_of(v)) for v in versions], str(base_rootfs)]
    key = hashlib.sha256("\0".join(recipe).encode()).hexdigest()[:16]
    final = cache_dir / f"python-{key}"
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        building = cache_dir / f".building-python-{key}-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        try:
            _fill(building, versions, base_rootfs)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        os.rename(building, final)
        return final
