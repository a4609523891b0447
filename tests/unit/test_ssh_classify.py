"""Every SSH failure class gets its sentence; secrets never appear in one."""

import errno
import socket
from pathlib import Path

import paramiko
import pytest

from miner2provider.core.inventory import Host, Secret
from miner2provider.detect.ssh import SshOptions, UnknownHostKey, classify, redact

HOST = Host("rig01", "10.0.0.7", 22, "user", None, Secret("hunter2"), None, ("all",), {})
OPTS = SshOptions(known_hosts=Path("/home/m/.ssh/known_hosts"), connect_timeout=5)


@pytest.mark.parametrize("exc, cls, words", [
    (socket.gaierror(-2, "Name or service not known"), "dns", "cannot resolve host name '10.0.0.7'"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "refused", "connection refused on 10.0.0.7:22"),
    (TimeoutError("timed out"), "timeout", "no answer from 10.0.0.7:22 within 5s"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "unreachable", "no route to 10.0.0.7:22"),
    (paramiko.AuthenticationException("Authentication failed."), "auth",
     "authentication failed for user 'user' (tried key, agent, password)"),
    (UnknownHostKey("SHA256:abc", "ssh-ed25519"), "host-key-unknown", "--accept-new"),
    (paramiko.SSHException("Error reading SSH protocol banner"), "ssh", "SSH failed on 10.0.0.7:22"),
    # paramiko's own words when it has nothing to offer: what to set instead of its jargon
    (paramiko.SSHException("No authentication methods available"), "auth",
     "no way to log in as 'user': no key file, no agent key and no password; set ansible_ssh_private_key_file, or "
     "m2p_ssh_password_env (then `m2p keys install` puts a key on the rig)"),
])
def test_failure_sentences(exc, cls, words):
    failure, sentence = classify(exc, HOST, OPTS)
    assert failure == cls
    assert words in sentence
    assert "hunter2" not in sentence


def test_changed_host_key_names_the_remedy():
    key = paramiko.Ed25519Key.from_private_key_file  # noqa: F841 - only the type matters below
    new = paramiko.RSAKey.generate(1024)
    failure, sentence = classify(paramiko.BadHostKeyException("10.0.0.7", new, new), HOST, OPTS)
    assert failure == "host-key-changed"
    assert 'ssh-keygen -f "/home/m/.ssh/known_hosts" -R "10.0.0.7"' in sentence
    other_port = Host("r", "10.0.0.8", 2222, None, None, None, None, (), {})
    assert '-R "[10.0.0.8]:2222"' in classify(paramiko.BadHostKeyException("x", new, new), other_port, OPTS)[1]


def test_redact_scrubs_secrets():
    assert redact("login hunter2 failed", [Secret("hunter2"), None]) == "login ******** failed"


def test_paramikos_wrapped_connect_errors():
    from paramiko.ssh_exception import NoValidConnectionsError

    refused = NoValidConnectionsError({("10.0.0.7", 22): ConnectionRefusedError(errno.ECONNREFUSED, "refused")})
    assert classify(refused, HOST, OPTS)[0] == "refused"
    assert classify(OSError(errno.ECONNREFUSED, "refused"), HOST, OPTS)[0] == "refused"
    other = NoValidConnectionsError({("10.0.0.7", 22): OSError(errno.EADDRNOTAVAIL, "no address")})
    failure, sentence = classify(other, HOST, OPTS)
    assert failure == "unreachable" and sentence.startswith("cannot connect to 10.0.0.7:22")
