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


def test_a_fan_outs_known_hosts_index_finds_what_lookup_finds(tmp_path):
    """keys_of (one dictionary read a rig) agrees with paramiko's lookup (every entry read), hashed names too."""
    from miner2provider.detect.ssh import KnownHosts

    first, second = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    hashed = paramiko.HostKeys.hash_host("10.0.0.9")
    lines = [f"10.0.0.1 {first.get_name()} {first.get_base64()}", f"10.0.0.1,[10.0.0.2]:2222 ssh-rsa "
             f"{paramiko.RSAKey.generate(1024).get_base64()}", f"10.0.0.3 {second.get_name()} {second.get_base64()}"]
    for with_hashed in (False, True):
        path = tmp_path / f"known_hosts_{with_hashed}"
        path.write_text("\n".join(lines + ([f"{hashed} {second.get_name()} {second.get_base64()}"] if with_hashed
                                            else [])) + "\n")
        known = KnownHosts()
        known.read(path)
        for name in ("10.0.0.1", "[10.0.0.2]:2222", "10.0.0.3", "10.0.0.9", "10.0.0.4"):
            found = known.lookup(name)
            assert known.keys_of(name) == ({key_type: found[key_type] for key_type in found} if found else {})
        assert known.keys_of("10.0.0.9") == ({second.get_name(): second} if with_hashed else {})


def test_a_fan_out_reads_each_key_file_once_and_prefers_aes_gcm():
    from miner2provider.detect.ssh import KeyFiles, _Transport

    files, reads = KeyFiles(), []

    def load(klass):
        reads.append(klass)
        if klass is not paramiko.Ed25519Key:
            raise paramiko.SSHException(f"not a valid {klass.__name__} private key file")
        return "the key"

    for _ in range(3):  # three rigs, each trying the key types in paramiko's order
        for klass in (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key):
            try:
                assert files.read(("id", klass, None), lambda klass=klass: load(klass)) == "the key"
            except paramiko.SSHException as exc:
                assert f"not a valid {klass.__name__}" in str(exc)
    assert reads == [paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key]
    sock = socket.socket()
    try:
        ciphers = _Transport(sock).get_security_options().ciphers
    finally:
        sock.close()
    assert ciphers[0].endswith("-gcm@openssh.com") and set(ciphers) == set(paramiko.Transport._preferred_ciphers)
