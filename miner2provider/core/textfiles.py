"""The files a user hands m2p (inventory, schedule, saved report), read defensively.

A file is read only when it is a regular file, at most ``MAX_BYTES``, UTF-8 text without NUL
bytes: a FIFO would hang, ``/dev/zero`` never ends, UTF-16 or binary would parse as nonsense.
YAML is composed with bounded nesting and bounded alias expansion (a 420-byte file must not
become 522 MB), merge keys (``<<: *common``) are applied as Ansible applies them, and values are
built only from the safe tags; every refusal is one sentence with file:line.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import yaml

from miner2provider.core.errors import M2PError

MAX_BYTES = 1024 * 1024  # the largest inventory of 1,000 rigs is ~200 KB
MAX_DEPTH = 64  # mappings and lists inside each other; an inventory needs about 6
MAX_NODES = 100_000  # nodes after expanding aliases; 1,000 rigs with 20 settings each need ~50,000
SHOWN = 48  # characters of a value a message may quote


def shown(value: object) -> str:
    """A value for a message: its repr, cut to ``SHOWN`` characters, control characters escaped."""
    text = repr(value) if not isinstance(value, str) or len(value) <= SHOWN else repr(value[:SHOWN]) + "..."
    return printable(text[: SHOWN + 10])


_INVISIBLE = {0x200E, 0x200F, 0x061C, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF}


_STYLE = re.compile(r"(\x1b\[[0-9;]*m)")  # click.style's colours


def printable(text: str, keep_style: bool = False) -> str:
    """``text`` safe for one terminal line: control and bidirectional-override characters escaped
    (``keep_style``: except the colour codes click.style put there)."""
    if all(ch.isprintable() and ord(ch) not in _INVISIBLE for ch in text):
        return text
    if keep_style:
        return "".join(part if _STYLE.fullmatch(part) else printable(part) for part in _STYLE.split(text))
    return "".join(ch if ch.isprintable() and ord(ch) not in _INVISIBLE else ascii(ch)[1:-1] for ch in text)


def read_text(path: str | os.PathLike[str], what: str, error: type[M2PError]) -> str:
    """The file's text, or ``error`` naming the file: missing, unreadable, not a regular file, too large,
    not UTF-8, or NUL bytes."""
    return decode(read_bytes(path, what, error), what, str(path), error)


def read_bytes(path: str | os.PathLike[str], what: str, error: type[M2PError], limit: int = MAX_BYTES) -> bytes:
    """The file's bytes, when it is a regular file of at most ``limit`` bytes."""
    where = str(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang; a regular file ignores the flag.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} not found", where=where) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror}", where=where) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"the {what} is a directory, not a file", where=where)
        if not stat.S_ISREG(mode):
            raise error(f"the {what} is not a regular file (a pipe or a device?)", where=where)
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read the {what}: {exc.strerror}", where=where) from None
    if len(data) > limit:
        raise error(f"the {what} is over {limit // 1024} KiB: not a file m2p writes or reads", where=where)
    return data


def decode(data: bytes, what: str, where: str, error: type[M2PError]) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(f"the {what} is UTF-16: save it as UTF-8", where=where)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(f"the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x})", where=f"{where}:{line}") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise error(f"the {what} holds a NUL byte: a binary file, not text", where=f"{where}:{line}")
    return text


def yaml_tree(text: str, where: str, error: type[M2PError],
              loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> yaml.Node | None:
    """The YAML node tree of ``text``, with nesting, alias expansion and merge keys checked."""
    _check_depth(text, where, error, loader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise error(f"YAML syntax error: {exc.problem or 'invalid YAML'}",
                    where=f"{where}:{mark.line + 1}" if mark else where) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a control character)
        line = text[: exc.position].count("\n") + 1
        raise error(f"the file holds a character YAML does not allow ({ascii(chr(exc.character))[1:-1]})"
                    if isinstance(exc.character, int) else "the file holds a character YAML does not allow",
                    where=f"{where}:{line}") from None
    except yaml.YAMLError as exc:
        raise error(f"YAML error: {printable(str(exc)[:120])}", where=where) from None
    if root is not None:
        try:
            _check_size(root, where, error)
            _apply_merges(root, where, error, set())
        except RecursionError:  # aliases inside aliases, each a level deeper
            raise error(f"aliases nest more than {MAX_DEPTH} levels deep", where=where) from None
    return root


def _check_depth(text: str, where: str, error: type[M2PError], loader: type[yaml.SafeLoader]) -> None:
    # The parser is iterative; the composer and constructor recurse: refuse deep nesting before them.
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise error(f"nested more than {MAX_DEPTH} levels deep", where=f"{where}:{line}")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return  # compose reports the syntax error with its line


def _check_size(root: yaml.Node, where: str, error: type[M2PError]) -> None:
    """Nodes counted as if every alias were expanded (memoised: linear in the file, not the expansion)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a node reached again while counting itself (a recursive alias): counted once
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1
        sizes[key] = min(total, MAX_NODES + 1)
        return sizes[key]

    if size(root) > MAX_NODES:
        raise error(f"aliases expand to over {MAX_NODES:,} values: refused (an alias bomb?)", where=where)


def _apply_merges(node: yaml.Node, where: str, error: type[M2PError], seen: set[int]) -> None:
    """Merge keys, as Ansible's loader (PyYAML's ``flatten_mapping``) applies them: the keys written in the
    mapping win over merged ones, and an earlier merged mapping over a later one."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _apply_merges(item, where, error, seen)
    if not isinstance(node, yaml.MappingNode):
        return
    merged: list[tuple[yaml.Node, yaml.Node]] = []
    own: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in node.value:
        if key.tag == "tag:yaml.org,2002:merge":
            sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise error("a merge key (<<) takes a mapping or a list of mappings",
                                where=f"{where}:{source.start_mark.line + 1}")
                _apply_merges(source, where, error, seen)
                merged.extend(source.value)
        else:
            own.append((key, value))
            _apply_merges(value, where, error, seen)
    if len(own) != len(node.value):
        written = {k.value for k, _ in own if isinstance(k, yaml.ScalarNode)}
        first: dict[object, tuple[yaml.Node, yaml.Node]] = {}
        for key, value in merged:
            name = key.value if isinstance(key, yaml.ScalarNode) else id(key)
            if name not in written:
                first.setdefault(name, (key, value))
        node.value = [*first.values(), *own]


def construct(node: yaml.Node, where: str, error: type[M2PError], what: str = "value",
              loader: type[yaml.SafeLoader] = yaml.SafeLoader) -> Any:
    """The Python value of ``node``; a tag that does not fit (``!!int abc``), an unknown or unsafe tag
    (``!!python/object``) is ``error`` at the node's line, never quoting a secret's text."""
    tag = printable(node.tag.replace("tag:yaml.org,2002:", "!!")[:SHOWN])
    line = at(where, node)
    try:
        return loader("").construct_object(node, deep=True)
    except yaml.constructor.ConstructorError:
        raise error(f"cannot read the {what}: {tag} is no tag m2p reads (plain YAML only)", where=line) from None
    except (ValueError, TypeError, OverflowError, RecursionError, yaml.YAMLError):
        raise error(f"cannot read the {what}: it does not fit its tag {tag}", where=line) from None


def at(where: str, node: yaml.Node) -> str:
    """``file:line`` of a YAML node."""
    return f"{where}:{node.start_mark.line + 1}"


def fields(node: yaml.MappingNode, where: str, error: type[M2PError], what: str, allowed: set[str] | None,
           unknown_hint: str = " (a model name or default)") -> dict[str, tuple[yaml.Node, Any]]:
    """A mapping's string keys -> (value node, value): a key not ``allowed`` (None: any) or given twice is
    ``error`` at its line, naming the keys known."""
    out: dict[str, tuple[yaml.Node, Any]] = {}
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) and key.tag.endswith(":str") else None
        if name is None or (allowed is not None and name not in allowed):
            known = f"; known: {', '.join(sorted(allowed))}" if allowed else unknown_hint
            raise error(f"unknown {what} key {shown(name)}{known}", where=at(where, key))
        if name in out:
            raise error(f"{name} is given twice", where=at(where, key))
        out[name] = (value, construct(value, where, error, name))
    return out
