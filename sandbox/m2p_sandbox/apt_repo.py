"""A STAND-IN Ubuntu driver repository: a flat apt repository of two packages, on the rig's disk.

Ubuntu installs NVIDIA's driver from its archive as ``nvidia-headless-<branch>-server`` and
``nvidia-utils-<branch>-server``; neither the archive nor a GPU exists here.  The packages built
here carry those names and versions and do one thing when installed: the utils package's
postinst sets the driver version the GPU stand-in reports (what loading the new module after
the reboot would show).  The repository is a folder with a ``Packages`` index, used through a
``deb [trusted=yes] file:<folder> ./`` source: apt reads it with no network, as it reads a
mirror.  Built like the test bundle's packages (bundle.build_deb).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from m2p_sandbox.bundle import build_deb
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
    package = f"{version}-0ubuntu1"

    def deb(name: str, depends: str = "", postinst: str = "") -> Path:
        return build_deb(root, name, package, section="restricted/libs", depends=depends, postinst=postinst,
                         description=f"m2p STAND-IN for Ubuntu's {name} (not the real driver)")
    debs = [deb(f"nvidia-utils-{branch}-server", postinst=SET_DRIVER.replace("@VERSION@", version)),
            deb(f"nvidia-headless-{branch}-server", depends=f"nvidia-utils-{branch}-server (= {package})")]
    (root / "Packages").write_text("\n".join(_index_entry(d) for d in debs))
    return root


if __name__ == "__main__":  # python -m m2p_sandbox.apt_repo DIR (Molecule's prepare step)
    import sys

    print(build_driver_repo(sys.argv[1]))
