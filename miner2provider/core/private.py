"""Files only this user can read or replace: the dashboard's token, the agent zipapp rigs run as root,
the debug log.

Why: a folder under a shared ``/tmp`` (or any folder another user can write) lets that user plant a file
of the name m2p expects, or swap it between m2p's write and its use.  So a private folder is made 0700
and checked with lstat (a real folder, not a link; ours; no group or other bits) before anything in it
is read or trusted, and private files are created 0600 with O_NOFOLLOW.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from .errors import UsageError


class UnsafePath(UsageError):
    """A folder or file m2p must keep private is a link, someone else's, or open to other users."""


def private_dir(path: Path) -> Path:
    """``path`` as a folder only this user can use: made 0700 (parents as needed) or checked if it exists."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    _ours_alone(path, stat.S_ISDIR, "not a plain folder (a link or a file)", "open to other users", "chmod 700")
    return path


def check_private_file(path: Path) -> os.stat_result:
    """A file m2p wrote for this user alone: a plain file, ours, mode 0600 or narrower."""
    return _ours_alone(path, stat.S_ISREG, "not a plain file (a link?)", "readable or writable by other users",
                       "chmod 600")


def _ours_alone(path: Path, kind: Callable[[int], bool], not_kind: str, shared: str, fix: str) -> os.stat_result:
    info = os.lstat(path)  # lstat: a link is never followed into someone else's file
    if stat.S_ISLNK(info.st_mode) or not kind(info.st_mode):
        raise UnsafePath(f"{path} is {not_kind}: m2p will not use it; remove it or choose another place")
    if info.st_uid != os.getuid():
        raise UnsafePath(f"{path} belongs to another user (uid {info.st_uid}): m2p will not use it")
    if info.st_mode & 0o077:
        raise UnsafePath(f"{path} is {shared} (mode {stat.S_IMODE(info.st_mode):o}): {fix} {path}")
    return info


def write_private(path: Path, data: bytes) -> Path:
    """``data`` into ``path`` (0600; replaced whole, never through a link) inside a private folder."""
    private_dir(path.parent)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return path


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path`` (created 0600, a link refused) inside a private folder."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # a log made before m2p kept it private
    return fd
