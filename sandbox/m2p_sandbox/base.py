"""The sandbox rigs' base root filesystem: Debian bookworm built from packages.

Built once with ``mmdebstrap`` and cached under the sandbox root; the cache key is a
hash of the recipe below, so changing the recipe rebuilds it and nothing else does.
Rigs never write to it: each one boots on an overlay whose lower layer is this tree.

HiveOS and its peers are Ubuntu-based; Debian is the closest base these machines can
build from the registries they reach, so m2p keys OS-specific logic on the facts a rig
reports, never on the distro name.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from m2p_sandbox.errors import SandboxError

SUITE = "bookworm"

# Only what a mining OS image has too (HiveOS, msOS and their peers are Ubuntu server images
# cut down to a USB stick).  Nothing here may exist only because a role needs it: a role that
# needs something brings it (bundle) or does without (python3-apt is not here: no apt module).
PACKAGES = (
    "systemd",  # every mining OS boots systemd and runs its miner service under it
    "systemd-sysv",  # /sbin/init, reboot, poweroff: the rig boots and reboots like a real one
    "dbus",  # systemctl talks to systemd over it (a real rig has it)
    "openssh-server",  # how m2p and the owner reach a rig
    "python3",  # Ubuntu's base has it (HiveOS's own tools use it); old versions: pythons.py
    "sudo",  # the login user (HiveOS: user) becomes root through it
    "screen",  # HiveOS and msOS run their miners in screen sessions
    "iproute2",  # `ip`: every Ubuntu image; the default-route fact reads it
    "procps",  # ps, pgrep, kill: every Ubuntu image; the miner adapters use them
    "ca-certificates",  # every Ubuntu image; HiveOS's own tools speak HTTPS
)

# Keep the image small (it is a USB-stick-sized rig, and CI copies nothing of it).
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)

# The test user every rig has: key auth (per rig key) and passwordless sudo.
TEST_USER = "rigadmin"

# Run in the finished tree.  Host keys are removed so that every rig gets its own;
# apt's timers are masked so that no background apt run holds the dpkg lock at a moment no test chose (a real
# rig's do: m2p waits for the lock, and tests/integration/test_faults.py holds it on purpose).
CUSTOMIZE = (
    'rm -f "$1"/etc/ssh/ssh_host_*',
    f'chroot "$1" useradd --create-home --shell /bin/bash --groups sudo {TEST_USER}',
    f'echo "{TEST_USER} ALL=(ALL) NOPASSWD:ALL" > "$1"/etc/sudoers.d/90-{TEST_USER}',
    f'chmod 0440 "$1"/etc/sudoers.d/90-{TEST_USER}',
    'printf "PasswordAuthentication yes\\nKbdInteractiveAuthentication no\\nUseDNS no\\n"'
    ' > "$1"/etc/ssh/sshd_config.d/50-m2p-sandbox.conf',
    'for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer'
    ' systemd-networkd-wait-online.service; do ln -sf /dev/null "$1"/etc/systemd/system/$u; done',
    'rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id && touch "$1"/etc/machine-id',
)

MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"


@dataclass(frozen=True)
class BaseImage:
    rootfs: Path
    recipe_hash: str
    built_now: bool
    build_seconds: float


def recipe() -> dict[str, object]:
    return {
        "suite": SUITE,
        "packages": sorted(PACKAGES),
        "dpkg": list(DPKG_OPTIONS),
        "customize": list(CUSTOMIZE),
        "hooks": ["merged-usr"],
        "format": 2,
    }


def recipe_hash() -> str:
    blob = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def machine_sources() -> list[str]:
    """The machine's own apt sources: the rigs use the mirrors this machine is set up with."""
    found = []
    if Path("/etc/apt/sources.list").is_file() and Path("/etc/apt/sources.list").read_text().strip():
        found.append("/etc/apt/sources.list")
    found += sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    found += sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
    if not found:
        raise SandboxError("no apt sources on this machine: cannot build the sandbox base")
    return found


def mmdebstrap_command(target: Path) -> list[str]:
    if not shutil.which("mmdebstrap"):
        raise SandboxError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    cmd = [
        "mmdebstrap",
        "--variant=apt",
        "--mode=root",
        "--format=directory",
        "--include=" + ",".join(PACKAGES),
        f"--hook-dir={MERGED_USR_HOOK}",
    ]
    cmd += [f"--dpkgopt={opt}" for opt in DPKG_OPTIONS]
    cmd += [f"--customize-hook={step}" for step in CUSTOMIZE]
    # mmdebstrap reads a sources file given in place of a mirror.
    return [*cmd, SUITE, str(target), *machine_sources()]


def is_built(cache_dir: Path) -> bool:
    """Whether the base for the current recipe is cached (else the next boot builds it first: about a minute)."""
    return (cache_dir / f"base-{recipe_hash()}" / "rootfs" / "usr" / "bin" / "python3").exists()


def ensure_base(cache_dir: Path, log: Path | None = None) -> BaseImage:
    """Return the cached base for the current recipe, building it first if needed.

    Safe to call from parallel test workers: a lock serialises the build and the
    finished tree appears atomically by rename.
    """
    key = recipe_hash()
    final = cache_dir / f"base-{key}"
    if (final / "rootfs" / "usr" / "bin" / "python3").exists():
        return BaseImage(final / "rootfs", key, False, 0.0)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "rootfs" / "usr" / "bin" / "python3").exists():
            return BaseImage(final / "rootfs", key, False, 0.0)
        building = cache_dir / f".building-{key}-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        log_path = log or cache_dir / f"build-{key}.log"
        started = time.monotonic()
        with open(log_path, "w") as out:
            proc = subprocess.run(
                mmdebstrap_command(building / "rootfs"), stdout=out, stderr=subprocess.STDOUT
            )
        if proc.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise SandboxError(f"building the sandbox base failed (exit {proc.returncode}); see {log_path}")
        (building / "recipe.json").write_text(json.dumps(recipe(), indent=2, sort_keys=True))
        os.rename(building, final)
        return BaseImage(final / "rootfs", key, True, time.monotonic() - started)
