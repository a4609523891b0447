"""Rig inventories: Ansible YAML inventories, loaded and validated with file:line errors.

The file is an ordinary Ansible YAML inventory (groups with ``hosts``, ``vars`` and
``children``; hosts with ``ansible_host``, ``ansible_user``, ``ansible_port``,
``ansible_ssh_private_key_file``, ``ansible_password``), so a miner's existing inventory
works and the same file feeds the roles later.  m2p's own settings start with ``m2p_`` and
are checked against the contract in ``settings.py``; a role variable set directly (``k3s_version``)
is checked against its role's argument specs, so a typo is an error, not a silent no-op.

Secrets: ``ansible_password`` may be a ``!vault`` value (decrypted with the vault
password file), or the password may come from an environment variable named by
``m2p_ssh_password_env``.  Passwords are kept in ``Secret`` objects that never print.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from miner2provider.core import checks, collection, settings, textfiles
from miner2provider.core.ansible_names import CONNECTION_VARIABLES, is_ansible_variable
from miner2provider.core.errors import InventoryError, InventoryProblems, VaultError

ANSIBLE_TYPES: dict[str, type] = {
    "ansible_host": str,
    "ansible_user": str,
    "ansible_port": int,
    "ansible_ssh_private_key_file": str,
    "ansible_password": str,
    "ansible_ssh_pass": str,
    "ansible_become_password": str,
    "ansible_become_pass": str,
    "ansible_python_interpreter": str,
    "ansible_ssh_common_args": str,
}

# Ansible's two spellings of each password (the first is the one m2p hands on).
LOGIN_PASSWORDS = ("ansible_password", "ansible_ssh_pass")
BECOME_PASSWORDS = ("ansible_become_password", "ansible_become_pass")
_SECRET_WORDS = ("pass", "token", "secret", "api_key")  # names with these words are secrets too

DEFAULT_PORT = 22
GROUP_KEYS = {"hosts", "vars", "children"}
POOL_GROUPS = ("k3s_server", "k3s_agent")  # the groups that pool rigs into one cluster
# Groups that look like pooling but are not m2p's: k3s-ansible's names, and the plurals.
_POOL_LOOKALIKES = {"server": "k3s_server", "agent": "k3s_agent", "master": "k3s_server", "node": "k3s_agent",
                    "k3s_cluster": "k3s_server and k3s_agent"}
REFUSED = object()  # a variable whose mistake is already said: what depends on it says nothing more
# Mistakes found so far in this load (each said once, with its line; the load goes on past those it can).
_PROBLEMS: contextvars.ContextVar[list[InventoryError] | None] = contextvars.ContextVar("_PROBLEMS", default=None)


@contextlib.contextmanager
def _noted() -> Any:
    """Note a mistake and go on (a structural one, a YAML error or a mapping that is not one, still stops)."""
    try:
        yield
    except InventoryProblems:
        raise
    except InventoryError as exc:
        found = _PROBLEMS.get()
        if found is None:
            raise
        # A mistake in a group's vars (all: vars:) is met once per rig that inherits it: said once, at its line.
        if not any(str(seen) == str(exc) for seen in found):
            found.append(exc)


class Secret:
    """A password or token: usable by code, never shown by str/repr/logs."""

    __slots__ = ("_value",)
    # Every secret this process has held: the debug log masks them all (a traceback may quote one).
    made: ClassVar[set[str]] = set()

    def __init__(self, value: str) -> None:
        self._value = value
        Secret.made.add(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("secret", len(self._value)))


@dataclass(frozen=True)
class Jump:
    """An SSH jump host: m2p's fan-out opens a tunnel through it, Ansible a ProxyCommand."""

    name: str  # as the inventory says it (an inventory host's name, or USER@HOST:PORT)
    address: str
    port: int
    user: str | None
    key_file: str | None


# A rig's name and settings -> what its marketplace refuses in them: (the sentence, the setting it is about).
RigCheck = Callable[[str, Mapping[str, Any]], Sequence[tuple[str, str]]]


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int
    user: str | None
    key_file: str | None
    password: Secret | None
    become_password: Secret | None
    groups: tuple[str, ...]
    vars: dict[str, Any] = field(hash=False, compare=False)
    where: str = ""  # file:line of the host's entry
    k3s_token: Secret | None = None  # join token for an external k3s server (m2p_k3s_token_env)
    agent_token: Secret | None = None  # the time-share agent's API token (m2p_agent_token_env)
    jump: Jump | None = None  # m2p_jump_host (or ProxyJump in ansible_ssh_common_args)

    def var(self, name: str, default: Any = None) -> Any:
        return self.vars.get(name, default)

    @property
    def node_name(self) -> str:
        """The rig's Kubernetes node: the k3s role's node-name (``k3s_node_name``, by default the inventory name,
        not the rig's hostname: HiveOS names every rig by its worker id)."""
        return str(self.var("k3s_node_name") or self.name)

    @property
    def control_node(self) -> bool:
        """m2p_control_node: a k3s server without GPUs (a VPS), which the GPU stack and the time-share leave out."""
        return self.var("m2p_control_node") is True

    def secrets(self) -> dict[str, Secret]:
        """The Ansible variable each secret goes to (vault-encrypted by the runner) -> the secret."""
        held = {var: getattr(self, attr) for attr, var in SECRET_VARIABLES.items()}
        return {var: secret for var, secret in held.items() if secret is not None}


# Host attribute -> the Ansible variable the runner hands that secret to.
SECRET_VARIABLES = {"password": "ansible_password", "become_password": "ansible_become_password",
                    "k3s_token": "k3s_agent_token", "agent_token": "timeshare_agent_api_token"}
# Variables whose values no message may quote and Host.vars never keeps.
SECRET_NAMES = {*SECRET_VARIABLES.values(), *LOGIN_PASSWORDS, *BECOME_PASSWORDS}


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: tuple[Host, ...]
    warnings: tuple[str, ...] = ()  # "file:line: ..." the CLI shows before it works

    def select(self, limit: str | None) -> list[Host]:
        """``--limit``: comma-separated host or group names; selecting no rig is an error."""
        if limit is None:
            return list(self.hosts)
        wanted = {part.strip() for part in limit.split(",") if part.strip()}
        if not wanted:
            raise InventoryError(f"--limit {textfiles.shown(limit)} names no host or group", where=str(self.path))
        chosen = [h for h in self.hosts if h.name in wanted or wanted & set(h.groups)]
        known = {h.name for h in self.hosts} | {g for h in self.hosts for g in h.groups}
        unknown = sorted(wanted - known)
        if unknown:
            raise InventoryError(f"--limit names no host or group: {textfiles.printable(', '.join(unknown))[:200]}",
                                 where=str(self.path))
        return chosen


def is_secret(name: str) -> bool:
    return name in SECRET_NAMES or any(word in name.lower() for word in _SECRET_WORDS)


# -- YAML with line numbers --------------------------------------------------------


class _Vaulted(str):
    """An inline ``!vault`` value, still encrypted."""


class _Loader(yaml.SafeLoader):
    pass


def _construct_vault(loader: _Loader, node: yaml.Node) -> _Vaulted:
    return _Vaulted(loader.construct_scalar(node))  # type: ignore[arg-type]


_Loader.add_constructor("!vault", _construct_vault)


def _line(path: Path, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def _compose(path: Path) -> yaml.Node | None:
    text = textfiles.read_text(path, "inventory file", InventoryError)
    return textfiles.yaml_tree(text, str(path), InventoryError, _Loader)


def _value(path: Path, node: yaml.Node, name: str = "") -> Any:
    return textfiles.construct(node, str(path), InventoryError, f"value of {name}" if name else "value", _Loader)


def _mapping(path: Path, node: yaml.Node | None, what: str) -> list[tuple[yaml.ScalarNode, yaml.Node]]:
    """The (key, value) pairs of a mapping node; duplicate keys are errors (YAML drops them)."""
    if node is None or (isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null")):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise InventoryError(f"{what} must be a mapping, found {_kind(node)}", where=_line(path, node))
    seen: dict[str, yaml.Node] = {}
    pairs = []
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise InventoryError(f"{what}: keys must be plain names", where=_line(path, key))
        if key.value in seen:
            raise InventoryError(
                f"duplicate {what} key {textfiles.shown(key.value)} "
                f"(first at line {seen[key.value].start_mark.line + 1})",
                where=_line(path, key),
            )
        seen[key.value] = key
        pairs.append((key, value))
    return pairs


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return "a single value"  # not quoted: the key may be a secret's name written in the wrong place


# -- validation ---------------------------------------------------------------------


def _check_var(path: Path, key: yaml.ScalarNode, value_node: yaml.Node, value: Any) -> None:
    name = key.value
    where = _line(path, value_node)
    choices: tuple[Any, ...] = ()
    if name.startswith("m2p_"):
        contract = settings.contract()
        if name not in contract:
            raise InventoryError(f"unknown m2p setting {name!r}{_closest(name, contract)}", where=_line(path, key))
        expected, choices = contract[name].python_type, contract[name].choices
        if name == "m2p_marketplace" and isinstance(value, bool):  # a bool before marketplaces had names
            raise InventoryError(f"m2p_marketplace names the marketplace now: {contract[name].default} (was true) "
                                 f"or {settings.NO_MARKETPLACE} (was false)", where=where)
    elif name in ANSIBLE_TYPES:
        expected = ANSIBLE_TYPES[name]
    elif name.startswith("ansible_"):
        if not is_ansible_variable(name):
            raise InventoryError(f"unknown Ansible variable {name!r}{_closest(name, CONNECTION_VARIABLES, 'cut')}",
                                 where=_line(path, key))
        return
    else:
        _check_role_variable(path, key)
        return  # role variables and other Ansible variables pass through to the roles
    if isinstance(value, _Vaulted) and expected is str:
        return
    ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
    if not ok:
        raise InventoryError(f"{name} must be {_type_name(expected)}, found {_found(name, value)}", where=where)
    if name == "ansible_port" and not 1 <= value <= 65535:
        raise InventoryError(f"ansible_port must be 1-65535, found {value}", where=where)
    if expected is int and value < 0:
        raise InventoryError(f"{name} must not be negative, found {value}", where=where)
    if expected is str and not value.strip():
        raise InventoryError(f"{name} is empty", where=where)
    if choices and value not in choices:
        raise InventoryError(f"{name} must be one of {', '.join(map(str, choices))}, found {_found(name, value)}",
                             where=where)
    if name == "m2p_python_interpreter" and not value.startswith("/"):
        raise InventoryError(f"m2p_python_interpreter must be an absolute path on the rig "
                             f"(such as /opt/python3.10/bin/python3), found {_found(name, value)}", where=where)
    if name == "ansible_host":
        _address(value, where)
    if name == "m2p_location_region" and not checks.is_region(value):
        raise InventoryError(f"m2p_location_region {textfiles.shown(value)}: letters, digits, '.', '_' and '-' "
                             "only (such as us-west)", where=where)
    if name in ("m2p_agent_api_server", "m2p_k3s_server_url") and not checks.is_api_server(value):
        raise InventoryError(f"{name} {textfiles.shown(value)}: give https://HOST:PORT", where=where)


def _found(name: str, value: Any) -> str:
    """What a message says was found: the type, and the value itself only when it is no secret."""
    kind = {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list",
            dict: "a mapping", type(None): "nothing"}.get(type(value), type(value).__name__)
    if isinstance(value, _Vaulted):
        return "a vault-encrypted value"
    if is_secret(name):
        return f"{kind} (its value is not shown{'; quote it' if isinstance(value, (int, float)) else ''})"
    return f"{kind} {textfiles.shown(value)}"


def _check_role_variable(path: Path, key: yaml.ScalarNode) -> None:
    """A name in a role's namespace (``k3s_...``) must be one of that role's variables."""
    options = collection.role_options()
    role = next((r for r in collection.role_names() if key.value.startswith(r + "_")), None)
    if role is not None and key.value not in options:
        known = [name for name in options if name.startswith(role + "_")]
        raise InventoryError(f"unknown variable {key.value!r} of role m2p.rigs.{role}{_closest(key.value, known)}",
                             where=_line(path, key))


def _closest(name: str, known: Collection[str], otherwise: str = "list") -> str:
    """"; did you mean X?", or else the known names (``otherwise="cut"``: nothing, for a long list)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        return f"; did you mean {close[0]}?"
    return f"; known: {', '.join(sorted(known))}" if otherwise == "list" else ""


def _type_name(t: type) -> str:
    return {str: "a string", int: "a whole number", bool: "true or false"}[t]


def _vars(path: Path, node: yaml.Node | None, what: str) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for key, value_node in _mapping(path, node, what):
        value = _value(path, value_node, key.value)
        out[key.value] = (REFUSED, _line(path, value_node))  # until it passes: its mistake is said once, here
        with _noted():
            _check_var(path, key, value_node, value)
            out[key.value] = (value, _line(path, value_node))
    return out


@dataclass
class _RawHost:
    name: str
    where: str
    layers: list[tuple[int, dict[str, tuple[Any, str]]]] = field(default_factory=list)  # (depth, vars)
    groups: list[str] = field(default_factory=list)


def _walk_group(path: Path, name: str, node: yaml.Node | None, depth: int,
                inherited: list[tuple[int, dict[str, tuple[Any, str]]]], lineage: list[str],
                hosts: dict[str, _RawHost]) -> None:
    if name in lineage:
        raise InventoryError(f"group {name!r} contains itself", where=_line(path, node) if node else str(path))
    pairs = dict((k.value, (k, v)) for k, v in _mapping(path, node, f"group {name!r}"))
    if not set(lineage) & set(POOL_GROUPS):  # a group inside k3s_agent pools with it, whatever its name
        with _noted():
            _check_group_name(path, name, node)
    for key, _ in pairs.values():
        if key.value not in GROUP_KEYS:
            raise InventoryError(
                f"group {name!r} has {key.value!r}; a group holds only hosts, vars and children"
                " (host variables go under the host, group variables under vars)",
                where=_line(path, key),
            )
    layers = list(inherited)
    if "vars" in pairs:
        layers.append((depth, _vars(path, pairs["vars"][1], f"vars of group {name!r}")))
    if "hosts" in pairs:
        for hkey, hnode in _mapping(path, pairs["hosts"][1], f"hosts of group {name!r}"):
            with _noted():
                _check_name(path, hkey, "host")
            host = hosts.setdefault(hkey.value, _RawHost(hkey.value, _line(path, hkey)))
            host.layers.extend(layers)
            host.layers.append((10_000, _vars(path, hnode, f"host {hkey.value!r}")))
            host.groups.extend(g for g in [*lineage, name] if g not in host.groups)
    if "children" in pairs:
        for ckey, cnode in _mapping(path, pairs["children"][1], f"children of group {name!r}"):
            with _noted():
                _check_name(path, ckey, "group")
            _walk_group(path, ckey.value, cnode, depth + 1, layers, [*lineage, name], hosts)


def _merge(raw: _RawHost) -> dict[str, tuple[Any, str]]:
    """Ansible's order: parent groups, then child groups, then the host itself."""
    merged: dict[str, tuple[Any, str]] = {}
    for _, layer in sorted(raw.layers, key=lambda item: item[0]):
        merged.update(layer)
    return merged


def load(path: str | os.PathLike[str], vault_password_file: str | None = None,
         environ: Mapping[str, str] | None = None, rig_check: RigCheck | None = None) -> Inventory:
    """Load and validate an inventory; raise InventoryError naming file:line.  ``rig_check``: the rules of the
    rigs' marketplaces (market.rig_settings_problems, which the CLI passes; core knows no marketplace)."""
    p = Path(path)
    env = os.environ if environ is None else environ
    root = _compose(p)
    if root is None:
        raise InventoryError("inventory is empty: it needs at least one group with hosts", where=str(p))
    problems: list[InventoryError] = []
    token = _PROBLEMS.set(problems)
    try:
        raw_hosts: dict[str, _RawHost] = {}
        for gkey, gnode in _mapping(p, root, "top level"):
            with _noted():
                _check_name(p, gkey, "group")
            _walk_group(p, gkey.value, gnode, 0, [], [], raw_hosts)
        if not raw_hosts and not problems:
            raise InventoryError("inventory lists no hosts", where=str(p))
        vault = _VaultOpener(p, vault_password_file)
        warnings: dict[str, None] = {}  # ordered, once per place
        hosts = []
        for raw in raw_hosts.values():
            with _noted():
                hosts.append(_build_host(p, raw, _merge(raw), vault, env, warnings, rig_check))
        if not problems:
            hosts = _with_jumps(hosts, {raw.name: _merge(raw) for raw in raw_hosts.values()})
            _check_duplicates(hosts)
    finally:
        _PROBLEMS.reset(token)
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise InventoryProblems(problems)
    return Inventory(p, tuple(hosts), tuple(warnings))


def _check_group_name(path: Path, name: str, node: yaml.Node | None) -> None:
    """A group that looks like pooling but is not m2p's would quietly make each of its rigs a cluster of one."""
    like = _POOL_LOOKALIKES.get(name) or next(iter(difflib.get_close_matches(name, POOL_GROUPS, n=1, cutoff=0.8)),
                                              None)
    if like and name not in POOL_GROUPS:
        raise InventoryError(f"group {name!r} looks like a pooling group, but m2p pools rigs only under k3s_server "
                             f"and k3s_agent: rename it to {like} (left as it is, each of its rigs would be a "
                             "cluster of its own)", where=_line(path, node) if node is not None else str(path))


def _build_host(path: Path, raw: _RawHost, merged: dict[str, tuple[Any, str]], vault: _VaultOpener,
                env: Mapping[str, str], warnings: dict[str, None], rig_check: RigCheck | None) -> Host:
    values = {k: v for k, (v, _) in merged.items() if v is not REFUSED}
    if "ansible_host" in values:
        address = _address(values["ansible_host"], merged["ansible_host"][1])
    elif "ansible_host" in merged:  # refused, and said
        address = ""
    elif _is_address(raw.name):
        address = _address(raw.name, raw.where)
    else:
        raise InventoryError(
            f"host {textfiles.shown(raw.name)} has no address: add ansible_host: <IP or DNS name>", where=raw.where)
    for keys, env_key in ((LOGIN_PASSWORDS, "m2p_ssh_password_env"), (BECOME_PASSWORDS, "m2p_become_password_env")):
        for key in keys:
            if key in values and not isinstance(values[key], _Vaulted):
                warnings[f"{merged[key][1]}: {key} is plain text in the inventory: encrypt it "
                         f"(ansible-vault encrypt_string) or name an environment variable in {env_key}"] = None
    for message, key in rig_check(raw.name, values) if rig_check is not None else ():
        raise InventoryError(message, where=merged[key][1] if key in merged else raw.where)
    _check_control_node(raw.name, raw.groups, values, merged)
    port = values.get("ansible_port", DEFAULT_PORT)
    password = _secret(values, merged, LOGIN_PASSWORDS, "m2p_ssh_password_env", vault, env)
    become = _secret(values, merged, BECOME_PASSWORDS, "m2p_become_password_env", vault, env)
    k3s_token = _secret(values, merged, ("k3s_agent_token",), "m2p_k3s_token_env", vault, env)
    agent_token = _secret(values, merged, ("timeshare_agent_api_token",), "m2p_agent_token_env", vault, env)
    key_file = values.get("ansible_ssh_private_key_file")
    if key_file is not None:
        # Relative to the inventory file, as Ansible reads it.
        expanded = Path(key_file).expanduser()
        key_file = str(expanded if expanded.is_absolute() else (path.parent / expanded).resolve())
        if Path(key_file).is_dir():
            raise InventoryError(f"ansible_ssh_private_key_file {textfiles.shown(key_file)} is a directory, "
                                 "not a key file", where=merged["ansible_ssh_private_key_file"][1])
        if not Path(key_file).exists():
            raise InventoryError(f"ansible_ssh_private_key_file '{textfiles.printable(key_file)}' does not exist "
                                 "on this machine (the controller's key, not the rig's)",
                                 where=merged["ansible_ssh_private_key_file"][1])
    clean = {k: v for k, v in values.items() if not isinstance(v, _Vaulted) and k not in SECRET_NAMES}
    return Host(
        name=raw.name, address=address, port=int(port), user=values.get("ansible_user"),
        key_file=key_file, password=password, become_password=become, groups=tuple(raw.groups),
        vars=clean, where=raw.where, k3s_token=k3s_token, agent_token=agent_token,
    )


# ProxyJump in ansible_ssh_common_args (the runner replaces it with its own ProxyCommand).
PROXY_JUMP = re.compile(r"-o\s*ProxyJump[= ]\s*(\S+)", re.IGNORECASE)
_JUMP_SPEC = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>[^@\s:]+)(?::(?P<port>\d{1,5}))?$")


def _with_jumps(hosts: list[Host], merged: dict[str, dict[str, tuple[Any, str]]]) -> list[Host]:
    """Resolve each rig's jump host: an inventory host's own address, port, user and key, or a
    USER@HOST:PORT the rig's own key logs in to.  ProxyJump in ansible_ssh_common_args says the same."""
    by_name = {h.name: h for h in hosts}
    out = []
    for host in hosts:
        values = merged[host.name]
        spec, where = values.get("m2p_jump_host", (None, ""))
        common, common_where = values.get("ansible_ssh_common_args", (None, ""))
        proxy = PROXY_JUMP.search(common) if isinstance(common, str) else None
        if proxy and spec is not None and proxy[1] != spec:
            raise InventoryError(f"m2p_jump_host {textfiles.shown(spec)} and ProxyJump {textfiles.shown(proxy[1])} "
                                 "in ansible_ssh_common_args disagree: give one", where=where)
        if proxy and spec is None:
            spec, where = proxy[1], common_where
        if spec is None:
            out.append(host)
            continue
        if spec == host.name:
            raise InventoryError(f"{host.name}: m2p_jump_host names the rig itself", where=where)
        jumper = by_name.get(spec)
        if jumper is not None:
            jump = Jump(spec, jumper.address, jumper.port, jumper.user, jumper.key_file)
        else:
            found = _JUMP_SPEC.match(spec)
            if not found or "," in spec or not 1 <= int(found["port"] or DEFAULT_PORT) <= 65535:
                raise InventoryError(f"m2p_jump_host {textfiles.shown(spec)}: give an inventory host's name or "
                                     "[USER@]HOST[:PORT] (one hop)", where=where)
            jump = Jump(spec, _address(found["host"], where), int(found["port"] or DEFAULT_PORT),
                        found["user"] or host.user, host.key_file)
        out.append(dataclasses.replace(host, jump=jump))
    return out


def _check_control_node(name: str, groups: Sequence[str], values: dict[str, Any],
                        merged: dict[str, tuple[Any, str]]) -> None:
    """A control node (a k3s server without GPUs) serves its farm: as an agent, it would be a node without GPUs
    joining someone else's cluster, which m2p has nothing to install on."""
    if values.get("m2p_control_node") is True and "k3s_agent" in groups:
        raise InventoryError(f"{name} has m2p_control_node but is in k3s_agent: a control node is its farm's k3s "
                             "server (group k3s_server)", where=merged["m2p_control_node"][1])


def _secret(values: dict[str, Any], merged: dict[str, tuple[Any, str]], keys: tuple[str, ...], env_key: str,
            vault: _VaultOpener, env: Mapping[str, str]) -> Secret | None:
    for key in keys:
        if key in values:
            value = values[key]
            if isinstance(value, _Vaulted):
                return Secret(vault.decrypt(value, merged[key][1]))
            return Secret(str(value))
    if env_key in values:
        name = values[env_key]
        if name not in env:
            raise InventoryError(f"{env_key} names ${name}, which is not set", where=merged[env_key][1])
        return Secret(env[name])
    return None


def _address(text: str, where: str) -> str:
    """``ansible_host`` (or a host name used as the address) in the form the resolver sees it: an IP
    address in its usual spelling (``127.0.0.01`` is ``127.0.0.1``, as inet_aton reads it), or an
    RFC 1123 DNS name; anything else (``;``, ``$(...)``, spaces, a newline) is an error."""
    canonical = checks.canonical_address(text)
    if canonical is None:
        raise InventoryError(f"ansible_host {textfiles.shown(text)} is not an IP address or a DNS name "
                             "(letters, digits, hyphens and dots)", where=where)
    return canonical


def _is_address(name: str) -> bool:
    """A host name that can be its own address: an IP address or a dotted DNS name (``rig01`` alone is
    more likely a label than a name the resolver knows: it needs ansible_host)."""
    canonical = checks.canonical_address(name)
    return canonical is not None and ("." in canonical or ":" in canonical)


def _check_name(path: Path, key: yaml.ScalarNode, what: str) -> None:
    """Host and group names end up in terminal lines, log lines and node labels: printable, no spaces."""
    name = key.value
    if not name or len(name) > 253 or textfiles.printable(name) != name or any(ch.isspace() for ch in name):
        raise InventoryError(f"{what} name {textfiles.shown(name)} has spaces, control or invisible characters "
                             "(or is over 253 characters)", where=_line(path, key))


def _check_duplicates(hosts: list[Host]) -> None:
    seen: dict[tuple[str, int, str], Host] = {}
    for host in hosts:
        # Behind different jump hosts (farms at two sites) one private address may be two rigs.
        via = f"{host.jump.address}:{host.jump.port}" if host.jump else ""
        key = (host.address.lower(), host.port, via)
        if key in seen:
            first = seen[key]
            raise InventoryError(
                f"host {host.name!r} has the same address {host.address}:{host.port} as "
                f"{first.name!r} ({first.where}): one rig listed twice",
                where=host.where,
            )
        seen[key] = host
    _check_node_names(hosts)


def _check_node_names(hosts: list[Host]) -> None:
    """A pooled farm is one cluster, where a node name is one rig: k3s refuses a second node of that name (its node
    password), and the dashboard reads each node's status as that rig's."""
    named: dict[str, Host] = {}
    for host in hosts:
        if not set(host.groups) & set(POOL_GROUPS):
            continue  # a rig in neither group is a cluster of its own
        first = named.setdefault(host.node_name.lower(), host)
        if first is not host:
            raise InventoryError(
                f"host {host.name!r} has the same Kubernetes node name {host.node_name!r} as {first.name!r} "
                f"({first.where}): one pooled farm cannot hold two nodes of one name; set k3s_node_name apart",
                where=host.where)


def vault_lib(password: bytes) -> Any:
    """ansible-core's own vault code, keyed with ``password`` (for the default vault id)."""
    from ansible.constants import DEFAULT_VAULT_ID_MATCH
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(password))])


class _VaultOpener:
    """Decrypts ``!vault`` values with ansible-core's own vault code."""

    def __init__(self, path: Path, password_file: str | None) -> None:
        self.path = path
        self.password_file = password_file
        self._lib: Any = None

    def decrypt(self, text: str, where: str) -> str:
        if self._lib is None:
            if not self.password_file:
                raise VaultError("value is vault-encrypted: pass --vault-password-file", where=where)
            # Bounded like every file m2p reads: a FIFO given as the password file must not hang.
            secret = textfiles.read_bytes(self.password_file, "vault password file", VaultError).strip()
            self._lib = vault_lib(secret)
        try:
            return str(self._lib.decrypt(text.encode()).decode())
        except Exception:  # ansible raises AnsibleError subclasses; never echo the text
            raise VaultError("cannot decrypt vault value (wrong vault password?)", where=where) from None


# The python3 m2p runs on a rig unless the inventory names another: the rig's own (the agent's unit and every
# Ansible task alike; the probe's `python3`).
SYSTEM_PYTHON = "/usr/bin/python3"


def python_of(settings: Mapping[str, Any]) -> str | None:
    """The rig's python3 the inventory names (m2p_python_interpreter, or an absolute
    ansible_python_interpreter), for Ansible, the probe and the agent alike; None: python3."""
    named = settings.get("m2p_python_interpreter") or settings.get("ansible_python_interpreter")
    return str(named) if isinstance(named, str) and named.startswith("/") else None
