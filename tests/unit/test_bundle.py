"""Offline bundles: the stand-in test bundle loads; damage and mistakes are named clearly."""

import hashlib
import shutil

import pytest
import yaml

from m2p_sandbox import bundle as standin
from m2p_sandbox import helm
from miner2provider.core import collection
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle.manifest import load_bundle


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    standin.build_test_bundle(root)
    return root


def test_test_bundle_loads_and_says_it_is_a_stand_in(bundle_dir):
    b = load_bundle(bundle_dir)
    assert b.standin is True
    assert b.k3s.version == standin.K3S_VERSION
    assert [a.name for a in b.toolkit_packages] == ["libnvidia-container1", "libnvidia-container-tools",
                                                   "nvidia-container-toolkit-base", "nvidia-container-toolkit"]


def test_role_vars_are_role_variables(bundle_dir):
    variables = load_bundle(bundle_dir).role_vars()
    known = {}
    for role in ("k3s", "nvidia_container_toolkit"):
        known.update(collection.role_defaults(role))
    assert set(variables) <= set(known)


def test_packages_are_byte_identical_between_builds(bundle_dir, tmp_path):
    standin.build_test_bundle(tmp_path)
    assert (tmp_path / "manifest.yml").read_text() == (bundle_dir / "manifest.yml").read_text()


def test_a_damaged_file_is_named(bundle_dir, tmp_path):
    standin.build_test_bundle(tmp_path)
    with open(tmp_path / "k3s/k3s", "ab") as f:
        f.write(b"\n# truncated download")
    with pytest.raises(BundleError, match=r"k3s/k3s: sha256 is [0-9a-f]{64}, the manifest says"):
        load_bundle(tmp_path)


def test_missing_manifest_and_bad_yaml(tmp_path):
    with pytest.raises(BundleError, match="no manifest.yml here"):
        load_bundle(tmp_path)
    (tmp_path / "manifest.yml").write_text("format: 1\nk3s: [unclosed\n")
    with pytest.raises(BundleError, match=r"manifest.yml:\d+: not valid YAML"):
        load_bundle(tmp_path)


def test_a_path_outside_the_bundle_is_refused(bundle_dir, tmp_path):
    standin.build_test_bundle(tmp_path)
    doc = yaml.safe_load((tmp_path / "manifest.yml").read_text())
    doc["k3s"]["file"] = "../../etc/passwd"
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleError, match="points outside the bundle"):
        load_bundle(tmp_path)


def test_convert_refuses_a_bundle_without_the_images_its_rigs_need(bundle_dir, tmp_path):
    from miner2provider.core import inventory
    from miner2provider.fleet import guards

    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  hosts:\n    r1: {ansible_host: 10.0.0.1}\n"
                   "    r2: {ansible_host: 10.0.0.2, nvidia_device_plugin_image: 'nvcr.io/nvidia/k8s-device-plugin:v0.21.0'}\n")
    hosts = list(inventory.load(inv).hosts)
    b = load_bundle(bundle_dir)
    guards.check_bundle_images(b, hosts[:1])  # the pinned device plugin is in the test bundle
    with pytest.raises(BundleError, match=r"lacks nvcr.io/nvidia/k8s-device-plugin:v0.21.0 \(rigs without internet"
                                          r".*--image nvcr.io/nvidia/k8s-device-plugin:v0.20.0 --image "):
        guards.check_bundle_images(b, hosts)
    # A bundle made before bundles carried images: both of its gaps are named.
    old = tmp_path / "old"
    shutil.copytree(bundle_dir, old)
    manifest = yaml.safe_load((old / "manifest.yml").read_text())
    del manifest["images"]
    (old / "manifest.yml").write_text(yaml.safe_dump(manifest))
    assert load_bundle(old).missing_images(["nvcr.io/nvidia/k8s-device-plugin:v0.20.0"]) == [
        f"k3s-airgap-images {standin.K3S_VERSION}", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"]


def test_the_provider_files_are_checked_as_the_rest_and_change_nothing_convert_installs(bundle_dir, tmp_path):
    standin.build_test_bundle(tmp_path)
    crd = tmp_path / "charts" / "akash-crd.yaml"
    crd.parent.mkdir()
    crd.write_bytes((helm.SHARED_AKASH / "crds" / "akash-crd.yaml").read_bytes())
    doc = yaml.safe_load((tmp_path / "manifest.yml").read_text())
    doc["charts"] = [{"name": crd.name, "version": "afc4dd7", "file": "charts/akash-crd.yaml",
                      "sha256": hashlib.sha256(crd.read_bytes()).hexdigest(), "checked": "the test's pin"}]
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(doc))
    b = load_bundle(tmp_path)
    assert [(a.name, a.path) for a in b.charts] == [("akash-crd.yaml", crd.resolve())]
    assert b.digest == load_bundle(bundle_dir).digest  # rigs converted from either are alike
    with crd.open("ab") as f:
        f.write(b"\n")
    with pytest.raises(BundleError, match=r"charts/akash-crd.yaml: sha256 is [0-9a-f]{64}, the manifest says"):
        load_bundle(tmp_path)
    doc["charts"] = {}
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleError, match="charts must be a list"):
        load_bundle(tmp_path)
