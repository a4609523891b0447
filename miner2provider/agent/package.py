"""The agent as one self-contained zipapp (``m2p-agent.pyz``) for rigs.

Rigs are often offline, on USB sticks, without ``python3-venv`` or pip: the agent goes as one
file run by the rig's own ``python3`` (nothing installed into it): m2p's agent and schedule
code, and the pure-Python parts of PyYAML and pynvml (nvidia-ml-py) taken from the controller.
The bytes are deterministic (sorted entries, fixed timestamps), so copying it again changes
nothing on a converged rig.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import tempfile
import zipfile
from pathlib import Path

import miner2provider

PACKAGE = Path(miner2provider.__file__).parent
MAIN = b"import sys\nfrom miner2provider.agent.service import main\nsys.exit(main())\n"
EPOCH = (1980, 1, 1, 0, 0, 0)


def _sources() -> dict[str, bytes]:
    files = {"__main__.py": MAIN}
    for rel in ("__init__.py", "errors.py", "textfiles.py", "economics.py"):
        files[f"miner2provider/{rel}"] = (PACKAGE / rel).read_bytes()
    for sub in ("agent", "schedule"):
        for path in sorted((PACKAGE / sub).glob("*.py")):
            files[f"miner2provider/{sub}/{path.name}"] = path.read_bytes()
    yaml_spec = importlib.util.find_spec("yaml")
    assert yaml_spec is not None and yaml_spec.origin is not None
    for path in sorted(Path(yaml_spec.origin).parent.glob("*.py")):  # no C extension: pure Python
        files[f"yaml/{path.name}"] = path.read_bytes()
    nvml_spec = importlib.util.find_spec("pynvml")
    if nvml_spec is not None and nvml_spec.origin is not None:
        files["pynvml.py"] = Path(nvml_spec.origin).read_bytes()
    return files


def build() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(_sources().items()):
            info = zipfile.ZipInfo(name, EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def write(directory: str | None = None) -> Path:
    """Build into DIRECTORY (default: a per-user temp dir), named by content; returns the path."""
    data = build()
    out = Path(directory or Path(tempfile.gettempdir()) / "m2p-agent")
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = out / f"m2p-agent-{hashlib.sha256(data).hexdigest()[:16]}.pyz"
    if not path.exists():
        path.write_bytes(data)
    return path
