"""A STAND-IN Ubuntu driver repository: a flat apt repository of two packages, on the rig's disk.

Ubuntu installs NVIDIA's driver from its archive as ``nvidia-headless-<branch>-server`` and
``nvidia-utils-<branch>-server``; neither the archive nor a GPU exists here.  The packages built
here carry those names and versions and do one thing when installed: the utils package's
postinst sets the driver version the GPU stand-in reports (what loading the new module after
the reboot would show).  The repository is a folder with a ``Packages`` index, used through a
``deb [trusted=yes] file:<folder> ./`` source: apt reads it with no network, as it reads a
mirror.  Built with dpkg-deb, like the test bundle's packages (bundle.py).
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

from m2p_sandbox.gpu_standin import CUDA_VERSION, DRIVER_VERSION, RIG_FILE

SET_DRIVER = f"""#!/bin/sh
# STAND-IN: a real driver package installs the kernel module and libraries; this one makes the
# GPU stand-in report the packaged version.
set -e
if [ "$1" = configure ] && [ -f {RIG_FILE} ]; then
    sed -i -e 's/"driver_version": "[^"]*"/"driver_version": "@VERSION@"/' \\
        -e 's/"cuda_version": "[^"]*"/"cuda_version": "{CUDA_VERSION}"/' {RIG_FILE}
fi
"""


def _package(out: Path, name: str, version: str, depends: str = "", postinst: str = "") -> Path:
    with tempfile.TemporaryDirectory(prefix="m2p-deb-") as tmp:
        tree = Path(tmp) / name
        (tree / "DEBIAN").mkdir(parents=True)
        control = [f"Package: {name}", f"Version: {version}-0ubuntu1", "Architecture: amd64",
                   "Maintainer: m2p test harness <m2p@localhost>", "Section: restricted/libs", "Priority: optional"]
        control += [f"Depends: {depends}"] if depends else []
        control.append(f"Description: m2p STAND-IN for Ubuntu's {name} (not the real driver)")
        (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if postinst:
            (tree / "DEBIAN" / "postinst").write_text(postinst.replace("@VERSION@", version))
            (tree / "DEBIAN" / "postinst").chmod(0o755)
        deb = out / f"{name}_{version}-0ubuntu1_amd64.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(deb)],
                       check=True, capture_output=True,
                       env={"SOURCE_DATE_EPOCH": "1700000000", "PATH": "/usr/bin:/bin"})
    return deb


def _index_entry(deb: Path) -> str:
    control = subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True,
                             text=True).stdout.strip()
    data = deb.read_bytes()
    return (f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")


def build_driver_repo(root: Path | str, version: str = DRIVER_VERSION) -> Path:
    """Write the repository into ``root`` (the folder a ``file:`` source names); returns it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    branch = version.split(".")[0]
    debs = [_package(root, f"nvidia-utils-{branch}-server", version, postinst=SET_DRIVER),
            _package(root, f"nvidia-headless-{branch}-server", version,
                     depends=f"nvidia-utils-{branch}-server (= {version}-0ubuntu1)")]
    (root / "Packages").write_text("\n".join(_index_entry(d) for d in debs))
    return root


if __name__ == "__main__":  # python -m m2p_sandbox.apt_repo DIR (Molecule's prepare step)
    import sys

    print(build_driver_repo(sys.argv[1]))
