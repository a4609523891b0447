"""Pulling an image into an OCI archive, against the STAND-IN registry on loopback
(m2p_sandbox.registry): token challenge, image index, digests checked."""

import hashlib
import json
import tarfile

import pytest

from m2p_sandbox.registry import RegistryStandin
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import images

IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"


@pytest.fixture
def registry():
    r = RegistryStandin(["nvidia/k8s-device-plugin:v0.20.0"])
    yield r
    r.close()


@pytest.mark.parametrize(("ref", "parsed"), [
    ("nvcr.io/nvidia/k8s-device-plugin:v0.20.0", ("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0")),
    ("busybox", ("docker.io", "library/busybox", "latest")),
    ("localhost:5000/a/b@sha256:" + "a" * 64, ("localhost:5000", "a/b", "sha256:" + "a" * 64)),
    ("rancher/mirrored-pause:3.6", ("docker.io", "rancher/mirrored-pause", "3.6")),
])
def test_references_parse_as_kubernetes_reads_them(ref, parsed):
    r = images.parse_ref(ref)
    assert (r.registry, r.repository, r.reference) == parsed


@pytest.mark.parametrize("bad", ["", "a b", "nvcr.io/UPPER/x:1", "x@sha256:short"])
def test_bad_references_are_refused(bad):
    with pytest.raises(BundleError):
        images.parse_ref(bad)


def test_pull_writes_an_oci_archive_of_the_amd64_image_with_checked_blobs(registry, tmp_path):
    dest = tmp_path / "dp.oci.tar"
    ref = images.pull(IMAGE, dest, registry_urls={"nvcr.io": registry.url})
    assert ref.file_name == "k8s-device-plugin-v0.20.0.oci.tar"
    assert images.archive_image_names(dest) == [IMAGE]
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())
        manifest_digest = index["manifests"][0]["digest"]
        manifest = json.loads(tar.extractfile("blobs/sha256/" + manifest_digest.split(":")[1]).read())
        config = json.loads(tar.extractfile("blobs/sha256/" + manifest["config"]["digest"].split(":")[1]).read())
        for name in names:
            if name.startswith("blobs/sha256/"):  # every blob is what its name says
                assert hashlib.sha256(tar.extractfile(name).read()).hexdigest() == name.rsplit("/", 1)[1]
    assert config["architecture"] == "amd64" and "oci-layout" in names
    again = tmp_path / "again.oci.tar"  # the same image gives the same archive (a stable sha256 in manifests)
    images.pull(IMAGE, again, registry_urls={"nvcr.io": registry.url})
    assert again.read_bytes() == dest.read_bytes()
    assert any("/blobs/" in p for p in registry.pulls)  # through the token it asked for


def test_a_tampered_blob_is_refused(registry, tmp_path):
    layer = max(registry.blobs, key=lambda d: len(registry.blobs[d]))
    registry.blobs[layer] = registry.blobs[layer][:-4] + b"evil"
    with pytest.raises(BundleError, match="sha256 .* but the registry named"):
        # whichever blob got altered, some pull must notice (an altered amd64 or arm64 layer)
        for arch in ("amd64", "arm64"):
            images.pull(IMAGE, tmp_path / f"{arch}.tar", registry_urls={"nvcr.io": registry.url}, arch=arch)


def test_unknown_tags_platforms_and_docker_hub_without_an_address_are_clear_errors(registry, tmp_path):
    urls = {"nvcr.io": registry.url}
    with pytest.raises(BundleError, match="HTTP 404"):
        images.pull("nvcr.io/nvidia/k8s-device-plugin:v9", tmp_path / "x.tar", registry_urls=urls)
    with pytest.raises(BundleError, match=r"no linux/riscv64 image \(offered: linux/amd64, linux/arm64\)"):
        images.pull(IMAGE, tmp_path / "x.tar", registry_urls=urls, arch="riscv64")
    with pytest.raises(BundleError, match="--image-registry docker.io=URL"):
        images.pull("busybox:1.36", tmp_path / "x.tar")
