"""Pulling an image into an OCI archive, against the STAND-IN registry on loopback
(m2p_sandbox.registry): token challenge, image index, digests checked.  A chart kept in a registry,
pulled the same way; the images charts run, read from Akash's, NGF's and cert-manager's real charts
(../shared/akash); the marketplace's pin table, read strictly."""

import hashlib
import json
import tarfile

import pytest

from m2p_sandbox import bundle as standin
from m2p_sandbox import helm
from m2p_sandbox.registry import RegistryStandin
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import charts, images

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


def test_a_chart_kept_in_a_registry_is_pulled_checked_and_only_a_chart(registry):
    archive = (helm.shared_charts() / "nginx-gateway-fabric-2.5.1.tgz").read_bytes()
    layer = standin.push_chart(registry, "nginx/charts/nginx-gateway-fabric", archive)
    urls = {"nvcr.io": registry.url}
    assert images.pull_chart("nvcr.io/nginx/charts/nginx-gateway-fabric:2.5.1", registry_urls=urls) == (archive, layer)
    with pytest.raises(BundleError, match=r"k8s-device-plugin:v0.20.0 is not a Helm chart \(a manifest with config "
                                          r"none; a chart has application/vnd.cncf.helm.config.v1\+json"):
        images.pull_chart(IMAGE, registry_urls=urls)  # an image index
    amd64 = json.loads(registry.manifests[("nvidia/k8s-device-plugin", "v0.20.0")][1])["manifests"][0]["digest"]
    with pytest.raises(BundleError, match=r"is not a Helm chart \(a manifest with config application/vnd.oci.image"):
        images.pull_chart(f"nvcr.io/nvidia/k8s-device-plugin@{amd64}", registry_urls=urls)  # an image
    registry.blobs[layer] = archive[:-1] + b"x"
    with pytest.raises(BundleError, match="sha256 .* but the registry named"):
        images.pull_chart("nvcr.io/nginx/charts/nginx-gateway-fabric:2.5.1", registry_urls=urls)


def chart_images(name):
    return charts.chart_images((helm.shared_charts() / name).read_bytes(), name)


def test_the_images_the_charts_run():
    provider = chart_images("provider-19.0.2.tgz")
    assert len(provider) == 1 and provider[0].endswith("/akash-network/provider:0.16.2")  # the chart's appVersion
    assert chart_images("akash-hostname-operator-19.0.2.tgz") == chart_images("akash-inventory-operator-19.0.2.tgz") \
        == provider
    assert chart_images("akash-gateway-1.2.1.tgz") == []
    ngf = chart_images("nginx-gateway-fabric-2.5.1.tgz")  # control plane, data plane: in the nginx org of one registry
    host = images.parse_ref(ngf[0]).registry
    assert ngf == [f"{host}/nginx/nginx-gateway-fabric:2.5.1", f"{host}/nginx/nginx-gateway-fabric/nginx:2.5.1"]
    cert_manager = chart_images("cert-manager-v1.19.1.tgz")
    assert [images.parse_ref(i).repository.rsplit("/", 1)[1] for i in cert_manager] == [
        "cert-manager-controller", "cert-manager-webhook", "cert-manager-cainjector", "cert-manager-acmesolver",
        "cert-manager-startupapicheck"]
    assert {images.parse_ref(i).reference for i in cert_manager} == {"v1.19.1"}


def test_image_values_as_the_templates_read_them():
    values = {"image": {"repository": "r.example/a"},
              "off": {"enabled": False, "image": {"repository": "r.example/never"}},
              "on": {"enabled": True, "image": {"registry": "r.example", "repository": "b", "tag": "2"}},
              "pinned": {"image": {"repository": "r.example/c", "digest": "sha256:" + "a" * 64}},
              "sidecarImage": {"repository": "r.example/not-an-image-key"}, "again": {"image": {"repository": "r.example/a"}}}
    assert charts.images_of(values, "1.0") == ["r.example/a:1.0", "r.example/b:2", "r.example/c@sha256:" + "a" * 64]
    with pytest.raises(BundleError, match="x.tgz: not a chart archive"):
        charts.chart_images(b"junk", "x.tgz")


@pytest.mark.parametrize(("entry", "error"), [
    ({"file": "a.tgz", "version": "1", "url": "https://x/a.tgz", "sha256": "A" * 64}, "is not a sha256"),
    ({"file": "a.tgz", "version": "1", "url": "https://x/a.tgz"}, "has no sha256 and says not why"),
    ({"file": "a.tgz", "version": "1", "url": "oci://{registry}/a:1", "caveat": "none published"},
     "names no pinned values.yaml"),
    ({"file": "a.tgz", "url": "https://x/a.tgz", "sha256": "a" * 64}, "is not file, version, url"),
    ({"file": "a.tgz", "version": "1", "url": "https://x/a.tgz", "sha256": "a" * 64, "colour": "red"},
     "is not file, version, url"),
])
def test_the_marketplace_pin_table_is_read_strictly(entry, error):
    with pytest.raises(BundleError, match=error):
        charts.Pinned.from_mapping(entry)


def test_optional_parts_only_when_asked():
    table = [charts.Pinned("a.tgz", "1", "https://x/a.tgz", "a" * 64),
             charts.Pinned("b.tgz", "1", "https://x/b.tgz", "b" * 64, extra="cert-manager")]
    assert [p.file for p in charts.select(table, ())] == ["a.tgz"]
    assert [p.file for p in charts.select(table, ["cert-manager"])] == ["a.tgz", "b.tgz"]


def test_the_marketplace_pins_what_its_publishers_list():
    """The real pins (issue 52): the four Akash archives' digests as Akash's chart repository index lists them, so
    ../shared/akash's repackaged archives are refused; the CRD files and NGF's values.yaml are the release bytes
    the test data keeps, so they pass."""
    table = {p.file: p for p in charts.marketplace_files()}
    published = {
        "provider-19.0.2.tgz": "fd4d5d8e7c1e5ef589d4c3ee3c1269b17f3a28a9ee3e73fc4197879d223e6a13",
        "akash-hostname-operator-19.0.2.tgz": "babfd36e0b0f37cd6581c797fac0b6256c1c8572cf072c57ab25ee5737be80b4",
        "akash-inventory-operator-19.0.2.tgz": "f777a5bf0dfebec76ece4cde483c7417623763b9b25bbf2ce6c66f1fb61beec1",
        "akash-gateway-1.2.1.tgz": "18695126b6e818a60e235232bd6b4bebd00509a6a24e437e3667e420a58731e8",
        "gateway-api-crds.yaml": "64ec76609a6ac885e0405dea79ca509c229fa019d342f0857aa8b6bdc8b8ba92",
    }
    assert {f: table[f].sha256 for f in published} == published
    assert set(table) == {*helm.FOLDER_NAMES, *(a.name for a in helm.shared_charts().glob("*.tgz"))}
    for name in published:
        if name.endswith(".tgz"):
            with pytest.raises(BundleError, match=rf"^{name} from here: sha256 .* but Akash's chart repository index"):
                charts.check(table[name], (helm.shared_charts() / name).read_bytes(), "here")
    for name, shared in helm.FOLDER_NAMES.items():
        charts.check(table[name], (helm.SHARED_AKASH / "crds" / shared).read_bytes(), "here")
    ngf, cert_manager = table["nginx-gateway-fabric-2.5.1.tgz"], table["cert-manager-v1.19.1.tgz"]
    archive = (helm.shared_charts() / ngf.file).read_bytes()
    charts.check_values(ngf, charts.chart_values(archive, ngf.file), "here")
    assert ngf.sha256 == "" and "no published digest" in ngf.caveat
    assert cert_manager.extra == "cert-manager" and "unconfirmed against jetstack's own chart index" in cert_manager.caveat
    assert cert_manager.sha256 == "f72a727b1749df3521e7a65af5f18505f93b572d758841890270b150344b2b41"
