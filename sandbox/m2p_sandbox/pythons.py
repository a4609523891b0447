"""Old python3s on sandbox rigs: the interpreters real mining images carry.

HiveOS stable images: 0.6-222 on Ubuntu 18.04 (python3 3.6), 0.6-227 on 20.04 (3.8), 0.6-229 on
22.04 (3.10) (shared/reference/mining-os.md §1.1).  The rigs' base is Debian bookworm, whose
python3 is 3.11.  A rig booted with ``python=("3.8",)`` gets one more read-only overlay layer,
built once per version list and cached beside the base:

- pyenv's build of that version (this machine's ``/root/.pyenv/versions/3.8.*``) laid out as
  Ubuntu's python3 package is: ``/usr/bin/python3.8``, ``/usr/lib/python3.8``, libpython in
  ``/usr/lib/x86_64-linux-gnu``; without its test suite, site-packages, build config, IDLE,
  tkinter and pip's wheels;
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

from m2p_sandbox.errors import SandboxError

# Left out of the copy: not needed to run Ansible's modules or m2p's agent, and 150 MB of 190.
LEFT_OUT = ("test", "site-packages", "config-*", "ensurepip", "idlelib", "tkinter", "turtledemo",
            "lib2to3", "__pycache__", "include", "share", "pkgconfig")
LAYER_FORMAT = 2


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
    libdir = layer / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    for i, version in enumerate(versions):
        build = build_of(version)
        # The first as Ubuntu lays it out (prefix /usr); the others as an owner's own build.
        prefix = layer / "usr" if i == 0 else layer / "opt" / f"python{version}"
        shutil.copytree(build / "lib" / f"python{version}", prefix / "lib" / f"python{version}",
                        symlinks=True, ignore=shutil.ignore_patterns(*LEFT_OUT))
        (prefix / "lib" / f"python{version}" / "site-packages").mkdir()
        (prefix / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "bin" / f"python{version}", prefix / "bin" / f"python{version}")
        # The binary's RUNPATH names pyenv's folder, absent on the rig: the loader falls back to
        # the system library folder, where Ubuntu keeps libpython too.
        for lib in build.glob(f"lib/libpython{version}*.so.1.0"):
            shutil.copy2(lib, libdir / lib.name)
        if i > 0:
            (prefix / "bin" / "python3").symlink_to(f"python{version}")
    usr_bin = layer / "usr" / "bin"
    for own in sorted(base_rootfs.glob("usr/bin/python3*")):
        _whiteout(usr_bin / own.name)
    (usr_bin / "python3").unlink()
    (usr_bin / "python3").symlink_to(f"python{versions[0]}")


def layer(versions: tuple[str, ...], base_rootfs: Path, cache_dir: Path) -> Path:
    """The cached layer for ``versions`` (built now if needed); safe from parallel workers."""
    recipe = [str(LAYER_FORMAT), *[str(build_of(v)) for v in versions], str(base_rootfs)]
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


def assert_only(host: object, version: str) -> None:
    """Molecule verify, on a rig booted with ``python=(version, ...)``: its python3 is ``version``
    and no newer python3.X is on PATH (so nothing m2p ran could have used one)."""
    run = host.run  # type: ignore[attr-defined]
    reported = run("python3 -V").stdout.strip()
    assert reported.startswith(f"Python {version}."), reported
    others = run("bash -c 'compgen -c python3. | sort -u'").stdout.split()
    assert others == [f"python{version}"], others
