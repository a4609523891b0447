"""The ``ansible_*`` variables Ansible itself reads for a host: its connection, become and shell plugins' documented
variables (ssh, paramiko_ssh, local; sudo, su; sh) and ``ansible.constants.MAGIC_VARIABLE_MAPPING``, for the
Ansible m2p pins.  Written out here so that loading an inventory does not import Ansible;
tests/unit/test_inventory_mistakes.py derives the same set from Ansible and keeps the two equal.  An
``ansible_<language>_interpreter`` is Ansible's too (its interpreter discovery reads any of them)."""

from __future__ import annotations

import re

CONNECTION_VARIABLES = frozenset({
    "ansible_admin_users", "ansible_async_dir", "ansible_become", "ansible_become_exe", "ansible_become_flags",
    "ansible_become_method", "ansible_become_pass", "ansible_become_password", "ansible_become_user",
    "ansible_common_remote_group", "ansible_connection", "ansible_connection_user", "ansible_control_path",
    "ansible_control_path_dir", "ansible_docker_extra_args", "ansible_host", "ansible_host_key_checking",
    "ansible_local_become_strip_preamble", "ansible_local_become_success_timeout", "ansible_module_compression",
    "ansible_network_os", "ansible_paramiko_host", "ansible_paramiko_host_key_checking", "ansible_paramiko_pass",
    "ansible_paramiko_password", "ansible_paramiko_port", "ansible_paramiko_private_key_file",
    "ansible_paramiko_proxy_command", "ansible_paramiko_timeout", "ansible_paramiko_use_rsa_sha2_algorithms",
    "ansible_paramiko_user", "ansible_password", "ansible_pipelining", "ansible_port", "ansible_private_key",
    "ansible_private_key_file", "ansible_private_key_passphrase", "ansible_remote_tmp", "ansible_scp_executable",
    "ansible_scp_extra_args", "ansible_sftp_batch_mode", "ansible_sftp_executable", "ansible_sftp_extra_args",
    "ansible_shell_allow_world_readable_temp", "ansible_shell_executable", "ansible_shell_type", "ansible_ssh_args",
    "ansible_ssh_common_args", "ansible_ssh_executable", "ansible_ssh_extra_args", "ansible_ssh_host",
    "ansible_ssh_host_key_checking", "ansible_ssh_pass", "ansible_ssh_password", "ansible_ssh_password_mechanism",
    "ansible_ssh_pipelining", "ansible_ssh_pkcs11_provider", "ansible_ssh_port", "ansible_ssh_private_key",
    "ansible_ssh_private_key_file", "ansible_ssh_private_key_passphrase", "ansible_ssh_retries",
    "ansible_ssh_timeout", "ansible_ssh_transfer_method", "ansible_ssh_use_tty", "ansible_ssh_user",
    "ansible_ssh_verbosity", "ansible_sshpass_prompt", "ansible_su_exe", "ansible_su_flags", "ansible_su_pass",
    "ansible_su_prompt_l10n", "ansible_su_user", "ansible_sudo_chdir", "ansible_sudo_exe", "ansible_sudo_flags",
    "ansible_sudo_pass", "ansible_sudo_user", "ansible_system_tmpdirs", "ansible_timeout", "ansible_user",
})
INTERPRETER = re.compile(r"ansible_[a-z0-9]+_interpreter")


def is_ansible_variable(name: str) -> bool:
    return name in CONNECTION_VARIABLES or INTERPRETER.fullmatch(name) is not None
