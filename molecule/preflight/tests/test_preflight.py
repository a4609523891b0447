"""Role preflight: read-only checks that refuse a rig with the reason and the fix."""

import pytest

from m2p_sandbox import flavours

REFUSAL = "/root/m2p-molecule-refusal.txt"


def name(host):
    return host.backend.get_hostname()


def refusal(host):
    with host.sudo():
        f = host.file(REFUSAL)
        return f.content_string if f.exists else None


def test_good_rig_passes_and_is_left_as_it_was(host):
    if name(host) != "pf-hive":
        pytest.skip("another rig")
    assert refusal(host) is None
    with host.sudo():
        assert not host.file("/var/lib/m2p").exists  # preflight writes nothing
    assert flavours.config_changes(host, "hiveos") == []


def test_rig_without_a_gpu_is_refused_with_the_reason(host):
    if name(host) != "pf-nogpu":
        pytest.skip("another rig")
    assert refusal(host) == "pf-nogpu: no nvidia-smi: no NVIDIA driver installed (or no NVIDIA GPU)\n"


def test_rig_below_the_disk_floor_is_refused_with_the_fix(host):
    if name(host) != "pf-disk":
        pytest.skip("another rig")
    text = refusal(host)
    assert text.startswith("pf-disk: ") and "k3s needs 100000 GB for its data; " in text, text
    assert "m2p_data_dir" in text  # the fix: an SSD and m2p_data_dir
