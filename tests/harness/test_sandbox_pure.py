"""Pure parts of the harness: recipe hashing, address plan, flavour data."""

import pytest

from m2p_sandbox import base, flavours, network
from m2p_sandbox.errors import SandboxError


def test_recipe_hash_is_stable_and_tracks_the_recipe(monkeypatch):
    first = base.recipe_hash()
    assert first == base.recipe_hash()
    monkeypatch.setattr(base, "PACKAGES", base.PACKAGES + ("curl",))
    assert base.recipe_hash() != first


def test_addresses_stay_inside_the_private_range(monkeypatch):
    monkeypatch.setenv("M2P_SANDBOX_NET", "10.99.0.0/24")
    assert str(network.gateway()) == "10.99.0.1"
    assert str(network.address_for(2)) == "10.99.0.2"
    with pytest.raises(SandboxError, match="full"):
        network.address_for(255)


@pytest.mark.parametrize("bad", ["8.8.8.0/24", "10.0.0.0/30", "not-a-net"])
def test_public_or_tiny_networks_are_refused(monkeypatch, bad):
    monkeypatch.setenv("M2P_SANDBOX_NET", bad)
    with pytest.raises(SandboxError):
        network.sandbox_network()


def test_flavours_load_and_name_their_stand_ins():
    assert flavours.available() == ["ethos", "hiveos", "mmpos", "msos", "nhos", "plain", "raveos", "smos", "ubuntu"]
    ubuntu = flavours.load("ubuntu")
    assert "STAND-IN" in ubuntu.description and "ID=ubuntu\n" in (ubuntu.root / "etc/os-release").read_text()
    hive = flavours.load("hiveos")
    assert [u.name for u in hive.users] == ["user"]
    assert (hive.root / "hive-config/rig.conf").is_file()
    assert (hive.root / "etc/environment").is_symlink()
    assert "STAND-IN" in hive.description
    with pytest.raises(SandboxError, match="unknown rig flavour"):
        flavours.load("winos")


def test_pristine_mining_config_lists_every_file_of_it():
    """The Molecule verifiers compare these on the rig: an empty map would make them vacuous."""
    hive = flavours.pristine_config("hiveos")
    assert sorted(hive) == ["/hive-config/RepoVer", "/hive-config/nvidia-oc.conf", "/hive-config/rig.conf",
                           "/hive-config/wallet.conf"]
    assert all(len(sha) == 64 for sha in hive.values())
    assert list(flavours.pristine_config("msos")) == ["/media/storage/config.js"]
    assert flavours.pristine_config("plain") == {}
