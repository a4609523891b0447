"""docs/quick-start.md, walked (tests/integration/test_wheel.py runs it with the installed wheel's m2p): every
command of its shell blocks, in the page's order, on a HiveOS-layout sandbox rig with a 4 GB board's memory (a
STAND-IN /proc/meminfo, sandbox/m2p_sandbox/rig.py), each exiting as the page says.  The page is the script: a
command added to it is walked, or the walk fails until it is named below with the test that covers it instead.

Stand-ins, each named where it is made: the rig (systemd, sshd, HiveOS's layout and its `user`/`1` login), the TEST
bundle (k3s and NVIDIA's packages: the vendors' sites are unreachable here), the Kubernetes API the converted rig's
kubelet credential and the server's `k3s kubectl` point at, the chain's RPC node and the AKT price feed; DNS
answers are given (no test may ask a resolver outside this machine)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import shlex
import socket
import subprocess
from pathlib import Path
from unittest import mock

import yaml

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.akash_node import RpcStandin
from m2p_sandbox.bundle import build_test_bundle
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.cli import main
from miner2provider.market.akash import checkup, outside

from .conftest import give_kubelet_credential, point_k3s_kubectl_at, wait_for
from .provider_flow import KEY

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quick-start.md"
DATA_DIR = "/mnt/ssd/k3s"  # the page's m2p_data_dir
# Lines of the page this test does not run, each with what runs it instead.
NOT_WALKED = {
    "git clone": "the walk runs in the clone it tests",
    "pip wheel": "test_wheel.py's `installed` builds the wheel with these very options",
    "pipx install": "test_wheel.py's `installed` puts it in a fresh virtualenv of its own, as pipx does",
    "m2p provider fetch": "downloads from the publishers: tests/unit/test_bundle_download.py, from a loopback site",
    "m2p provider apply": "Akash's provider on a converted farm: tests/integration/provider_flow.py",
    "m2p provider remove": "tests/integration/provider_flow.py, after its apply",
}
# Where the page names more than one exit, the one this walk must see.
WALK_EXITS = {"m2p plan --limit rig01": 1, "m2p provider check": 0}


def page_lines() -> list[tuple[str, str]]:
    """Each command line of the page's ```sh blocks, in order, with its comment."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S):
        for raw in block.splitlines():
            command, _, comment = raw.partition(" # ")
            if command.strip():
                lines.append((" ".join(command.split()), comment.strip()))
    return lines


def expected_exit(command: str, comment: str) -> int:
    named = {int(n) for n in re.findall(r"exit (\d+)", comment)}
    if command in WALK_EXITS:
        assert WALK_EXITS[command] in named | {0}, f"the page no longer says {command} exits {WALK_EXITS[command]}"
        return WALK_EXITS[command]
    return 0


def password_inventory(rig: sandbox.Rig) -> dict:
    """The page's inventory, as its owner fills it in for this rig."""
    return {"all": {"vars": {"ansible_user": "user", "m2p_ssh_password_env": "RIG_PW",
                             "m2p_become_password_env": "RIG_PW",
                             # This machine's disk is not a rig's: the sandbox's rootfs holds less than 40 GB free.
                             "m2p_min_free_disk_gb": 5},
                    "children": {"k3s_server": {"hosts": {"rig01": {"ansible_host": rig.address,
                                                                    "m2p_data_dir": DATA_DIR}}}}}}


def key_inventory(rig: sandbox.Rig, home: Path) -> dict:
    """The page's second edit: the key `keys install` put in, instead of the login password."""
    doc = password_inventory(rig)
    del doc["all"]["vars"]["m2p_ssh_password_env"]
    doc["all"]["vars"]["ansible_ssh_private_key_file"] = str(home / ".ssh" / "id_ed25519")
    return doc


class Walk:
    """Runs the page's lines in a folder of its own, as the owner's shell would."""

    def __init__(self, rig: sandbox.Rig, tmp: Path, venv: Path) -> None:
        self.rig, self.cwd, self.home, self.venv = rig, tmp / "farm", tmp / "home", venv
        self.cwd.mkdir()
        self.home.mkdir()
        bundle = tmp / "bundle"
        build_test_bundle(bundle)
        # The installed m2p alone: no PYTHONPATH to this checkout.
        self.env = {**os.environ, "PYTHONPATH": "", "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
                    "HOME": str(self.home), "M2P_BUNDLE": str(bundle),
                    "M2P_KNOWN_HOSTS": str(self.home / ".ssh" / "known_hosts"), "PYTHONUNBUFFERED": "1"}
        self.edits = {"rigs.yml": [yaml.safe_dump(password_inventory(rig)),
                                   yaml.safe_dump(key_inventory(rig, self.home))]}
        self.rpc = RpcStandin()
        self.feed = socket.create_server((str(network.gateway()), 0))  # the AKT price feed, standing in
        self.api: KubeApiStandin | None = None
        self.ran: list[str] = []
        self.check_json = ""

    def close(self) -> None:
        self.feed.close()
        self.rpc.close()
        if self.api is not None:
            self.api.close()

    def editor(self, name: str) -> None:
        if name == "provider.yml":
            self.fill_provider_file()
        else:
            (self.cwd / name).write_text(self.edits[name].pop(0))

    def fill_provider_file(self) -> None:
        key = self.cwd / "provider.key"
        key.write_text(KEY)
        key.chmod(0o600)
        path = self.cwd / "provider.yml"
        text = path.read_text()
        for old, new in (("rpc_node: https://rpc.example.com:443", f"rpc_node: {self.rpc.url}"),):
            assert old in text, old
            text = text.replace(old, new)
        path.write_text(text)

    def run(self, command: str, comment: str) -> None:
        words = shlex.split(command)
        if words[0] == "read":  # read -rs VAR && export VAR: the owner types a secret
            self.env[words[2]] = "1" if words[2] == "RIG_PW" else "pass-" + secrets.token_urlsafe(12)
            return
        if words[0] == "$EDITOR":
            self.editor(words[1])
            return
        assert words[0] == "m2p", f"the page runs {command!r}: walk it, or name it in NOT_WALKED"
        self.before(command)
        want = expected_exit(command, comment)
        if command == "m2p provider check":
            code, said = self.provider_check()
        else:
            code, said = self.m2p(words[1:])
        assert code == want, f"`{command}` exited {code}, the page says {want}:\n{said[-4000:]}"
        self.ran.append(command)
        self.after(command, said)

    def m2p(self, args: list[str]) -> tuple[int, str]:
        """The command as the owner runs it, on a terminal: a question is answered yes."""
        main_fd, tty = os.openpty()
        try:
            os.write(main_fd, b"y\n" * 4)  # every question yes (keys install asks two)
            proc = subprocess.run([str(self.venv / "bin" / "m2p"), *args], cwd=self.cwd, env=self.env, stdin=tty, capture_output=True,
                                  text=True, timeout=600)
        finally:
            os.close(tty)
            os.close(main_fd)
        return proc.returncode, proc.stdout + proc.stderr

    def provider_check(self) -> tuple[int, str]:
        """In-process (this checkout's m2p, the one place the walk leaves the wheel), so that DNS can be given:
        both names answer with a public address no test connects to; the price feed the server must reach is the
        stand-in's listener."""
        feed = "{}:{}".format(*self.feed.getsockname()[:2])
        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(outside, "resolve", lambda name, *a, **k: ("81.2.69.160",)), \
                mock.patch.object(checkup, "PRICE_FEEDS", (feed,)), mock.patch.dict(os.environ, self.env), \
                contextlib.chdir(self.cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["provider", "check", "--json"])
        self.check_json = out.getvalue()
        return code, out.getvalue() + err.getvalue()

    def before(self, command: str) -> None:
        if command.startswith("m2p schedule apply"):
            # The converted rig's k3s is a stand-in: its kubelet credential and `k3s kubectl` point at this API.
            self.api = KubeApiStandin(host=str(network.gateway()), tls=True)
            admin = secrets.token_urlsafe(16)
            self.api.admin_tokens.add(admin)
            point_k3s_kubectl_at(self.rig, self.api, admin)
            self.api.add_node("rig01", secrets.token_urlsafe(16), gpus=2)
            give_kubelet_credential(self.rig, self.api, "rig01", data_dir=DATA_DIR)

    def after(self, command: str, said: str) -> None:
        if command == "m2p detect":
            # A 4 GB board is not refused: its usable and installed memory said as the owner knows them.
            assert "3854 MB RAM usable (about 4 GB installed)" in said and "needs at least" not in said, said[-3000:]
        if command == "m2p provider check":
            found = {(v["topic"], v["level"]) for v in json.loads(self.check_json)}
            assert ("audit floor", "warn") in found and ("wallet", "ok") in found, found
        if command.startswith("m2p schedule apply"):
            api = self.api
            assert api is not None
            wait_for("the agent to publish its mode", lambda: "m2p.io/mode" in api.nodes["rig01"]["metadata"]
                     .get("labels", {}), timeout=120)


def walk_the_page(boot_rigs, tmp: Path, venv: Path) -> None:
    lines = page_lines()
    skipped = [c for c, _ in lines if any(c.startswith(p) for p in NOT_WALKED)]
    assert {p for p in NOT_WALKED if any(c.startswith(p) for c in skipped)} == set(NOT_WALKED), \
        "a line NOT_WALKED names is no longer on the page"
    tmp.mkdir(parents=True, exist_ok=True)
    (rig,) = boot_rigs(sandbox.RigSpec("rig01", "hiveos", ("rtx3070", "rtx3070"), memory_mb=3854))
    walk = Walk(rig, tmp, venv)
    try:
        for command, comment in lines:
            if command not in skipped:
                walk.run(command, comment)
    finally:
        walk.close()
    assert walk.ran[:3] == ["m2p --version", "m2p init", "m2p inventory check"], walk.ran
    assert walk.ran.index("m2p provider check") < walk.ran.index("m2p convert --limit rig01")  # go/no-go first
    assert walk.ran[-1] == "m2p revert"
