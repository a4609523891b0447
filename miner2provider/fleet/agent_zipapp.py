"""The agent as one self-contained zipapp (``m2p-agent.pyz``) for rigs.

Rigs are often offline, on USB sticks, without ``python3-venv`` or pip: the agent goes as one
file run by the rig's own ``python3`` (nothing installed into it): m2p's agent and schedule
code, and the pure-Python parts of PyYAML and pynvml (nvidia-ml-py) taken from the controller.
The bytes are deterministic (sorted entries, fixed timestamps), so copying it again changes
nothing on a converged rig.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import os
import zipfile
from pathlib import Path

import miner2provider
from miner2provider.core.private import UnsafePath, check_private_file, private_dir, write_private
from miner2provider.fleet.bundle.manifest import sha256_of

PACKAGE = Path(miner2provider.__file__).parent
AGENT = "miner2provider.agent.loop"
EPOCH = (1980, 1, 1, 0, 0, 0)


def rig_modules(entry: str = AGENT, hollow: frozenset[str] = frozenset()) -> list[str]:
    """The m2p modules the agent imports, ``entry`` and its import closure with their packages:
    exactly what goes to rigs (tests/unit/test_layers.py keeps it free of controller code).  A ``hollow``
    package is packed with an empty ``__init__`` and its imports are not followed (the reclaimer's
    market packages, whose ``__init__`` gathers the controller's marketplace code)."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in hollow:
            continue
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages' __init__.py
        path = module_path(name)
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "miner2provider":
                todo.append(node.module)
                todo += [f"{node.module}.{a.name}" for a in node.names if module_exists(f"{node.module}.{a.name}")]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == "miner2provider"]
    return sorted(seen)


def module_path(name: str) -> Path:
    rel = PACKAGE.joinpath(*name.split(".")[1:])
    return rel / "__init__.py" if rel.is_dir() else rel.with_suffix(".py")


def module_exists(name: str) -> bool:
    return module_path(name).is_file()


def _sources(entry: str, hollow: frozenset[str]) -> dict[str, bytes]:
    files = {"__main__.py": f"import sys\nfrom {entry} import main\nsys.exit(main())\n".encode()}
    for name in rig_modules(entry, hollow):
        path = module_path(name)
        files[path.relative_to(PACKAGE.parent).as_posix()] = b"" if name in hollow else path.read_bytes()
    yaml_spec = importlib.util.find_spec("yaml")
    assert yaml_spec is not None and yaml_spec.origin is not None
    for path in sorted(Path(yaml_spec.origin).parent.glob("*.py")):  # no C extension: pure Python
        files[f"yaml/{path.name}"] = path.read_bytes()
    nvml_spec = importlib.util.find_spec("pynvml")
    if nvml_spec is not None and nvml_spec.origin is not None:
        files["pynvml.py"] = Path(nvml_spec.origin).read_bytes()
    return files


def build(entry: str = AGENT, hollow: frozenset[str] = frozenset()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(_sources(entry, hollow).items()):
            info = zipfile.ZipInfo(name, EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def default_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "m2p" / "agent"


def write(directory: str | None = None, entry: str = AGENT, name: str = "m2p-agent") -> Path:
    """Build into DIRECTORY (default: ``~/.cache/m2p/agent``), named by content; returns the path.

    Rigs run this file as root, so it is built only in a private folder (0700, ours, lstat-checked:
    never a shared ``/tmp`` path another user could plant a file of the expected name in), and the file
    is hashed after writing; a file already there is used only when its bytes hash to the build's."""
    data = build(entry, _hollow(entry))
    digest = hashlib.sha256(data).hexdigest()
    out = private_dir(Path(directory) if directory else default_dir())
    path = out / f"{name}-{digest[:16]}.pyz"
    if path.exists() or path.is_symlink():
        check_private_file(path)
        if sha256_of(path) == digest:
            return path
    write_private(path, data)
    if sha256_of(path) != digest:
        raise UnsafePath(f"{path} changed while m2p wrote it: something else writes into {out}")
    return path


def _hollow(entry: str) -> frozenset[str]:
    """The agent's packages are whole; another entry's own packages (below ``miner2provider``) are hollow."""
    if entry == AGENT:
        return frozenset()
    parts = entry.split(".")
    return frozenset(".".join(parts[:i]) for i in range(2, len(parts)))
