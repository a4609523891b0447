"""`m2p bundle DIR` against a vendor site served on loopback.

The site is laid out like the real ones (a k3s release directory with its
sha256sum-amd64.txt; NVIDIA's flat apt repository with a Packages index), and serves
the stand-in k3s and toolkit .debs of the test bundle: the vendors are unreachable here.
"""

import functools
import hashlib
import http.server
import shutil
import threading

import pytest

from m2p_sandbox import bundle as standin
from m2p_sandbox.registry import RegistryStandin
from miner2provider.cli import main
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import images, pins
from miner2provider.fleet.bundle.download import make_bundle, pick_packages, stanzas
from miner2provider.fleet.bundle.manifest import load_bundle

VERSION = standin.TOOLKIT_VERSION


def packages_entry(deb, name, version):
    data = deb.read_bytes()
    return (f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: NVIDIA\n"
            f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
            "Description: NVIDIA container toolkit\n multi-line description, continued\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A loopback HTTP server with releases/<k3s version>/ and toolkit/amd64/Packages."""
    root = tmp_path_factory.mktemp("site")
    built = tmp_path_factory.mktemp("standin")
    standin.build_test_bundle(built)
    release = root / "releases" / standin.K3S_VERSION
    release.mkdir(parents=True)
    shutil.copy(built / "k3s" / "k3s", release / "k3s")
    k3s_sum = hashlib.sha256((release / "k3s").read_bytes()).hexdigest()
    shutil.copy(built / "images" / "k3s-airgap-images-amd64.tar.zst", release / "k3s-airgap-images-amd64.tar.zst")
    airgap_sum = hashlib.sha256((release / "k3s-airgap-images-amd64.tar.zst").read_bytes()).hexdigest()
    (release / "sha256sum-amd64.txt").write_text(f"{'0' * 64}  k3s-airgap-images-amd64.tar\n{k3s_sum}  k3s\n"
                                                 f"{airgap_sum}  k3s-airgap-images-amd64.tar.zst\n")
    repo = root / "toolkit" / "amd64"
    repo.mkdir(parents=True)
    entries = []
    for deb in sorted((built / "debs").glob("*.deb")):
        name = deb.name.split("_")[0]
        shutil.copy(deb, repo / deb.name)
        entries.append(packages_entry(repo / deb.name, name, f"{VERSION}-1"))
        # an older version listed too: the pinned one must be picked
        entries.append(packages_entry(repo / deb.name, name, "1.16.2-1").replace(f"./{deb.name}", "./old.deb"))
    (repo / "Packages").write_text("\n".join(entries))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    registry = RegistryStandin(["nvidia/k8s-device-plugin:v0.20.0"])  # the pinned device plugin's name
    yield {"root": root, "releases": f"{base}/releases", "repo": f"{base}/toolkit/$(ARCH)", "base": base,
           "registry": registry.url}
    server.shutdown()
    registry.close()


def args(site, directory):
    return ["bundle", str(directory), "--k3s-release-url", site["releases"], "--toolkit-repo-url", site["repo"],
            "--image-registry", f"nvcr.io={site['registry']}"]


def test_bundle_downloads_checks_and_loads(site, tmp_path, capsys):
    assert main(args(site, tmp_path / "b")) == 0
    assert "bundle ready" in capsys.readouterr().out
    b = load_bundle(tmp_path / "b")
    assert b.standin is False and b.k3s.version == standin.K3S_VERSION
    assert [(a.name, a.version) for a in b.toolkit_packages] == [
        ("libnvidia-container1", f"{VERSION}-1"), ("libnvidia-container-tools", f"{VERSION}-1"),
        ("nvidia-container-toolkit-base", f"{VERSION}-1"), ("nvidia-container-toolkit", f"{VERSION}-1")]
    assert (tmp_path / "b" / "k3s" / "k3s").stat().st_mode & 0o111
    assert [(a.name, a.version, a.path.name) for a in b.images] == [
        ("k3s-airgap-images", standin.K3S_VERSION, "k3s-airgap-images-amd64.tar.zst"),
        (pins.DEVICE_PLUGIN_IMAGE, pins.DEVICE_PLUGIN_IMAGE.rsplit(":", 1)[1], "k8s-device-plugin-v0.20.0.oci.tar")]
    assert b.missing_images(pins.IMAGES) == []
    assert images.archive_image_names(b.images[1].path) == [pins.DEVICE_PLUGIN_IMAGE]


def test_an_image_the_registry_lacks_stops_the_bundle(site, tmp_path, capsys):
    ref = "nvcr.io/nvidia/k8s-device-plugin:v0.99.0"
    assert main([*args(site, tmp_path / "b"), "--image", ref]) == BundleError.exit_code
    assert "k8s-device-plugin/manifests/v0.99.0: HTTP 404" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    assert main([*args(site, tmp_path / "c"), "--image-registry", "nvcr.io"]) == 2
    assert "--image-registry nvcr.io: give HOST=URL" in capsys.readouterr().err


def test_a_damaged_download_is_refused_and_nothing_is_left(site, tmp_path, capsys):
    deb = site["root"] / "toolkit" / "amd64" / f"nvidia-container-toolkit_{VERSION}-1_amd64.deb"
    good = deb.read_bytes()
    deb.write_bytes(good[:-10] + b"0123456789")
    try:
        assert main(args(site, tmp_path / "b")) == BundleError.exit_code
    finally:
        deb.write_bytes(good)
    err = capsys.readouterr().err
    assert f"nvidia-container-toolkit_{VERSION}-1_amd64.deb: sha256 " in err and "tampered" in err
    assert not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m2p-bundle-")]


def test_a_version_the_repository_lacks_is_named_with_what_it_offers(site, tmp_path, capsys):
    assert main([*args(site, tmp_path / "b"), "--toolkit-version", "9.9.9"]) == BundleError.exit_code
    err = capsys.readouterr().err
    assert "has no 9.9.9-1 (amd64) of libnvidia-container1" in err and "1.16.2-1" in err


def test_missing_release_and_unreachable_site_are_one_line_each(site, tmp_path, capsys):
    assert main([*args(site, tmp_path / "b"), "--k3s-version", "v9.9.9+k3s1"]) == BundleError.exit_code
    assert "v9.9.9%2Bk3s1/sha256sum-amd64.txt: HTTP 404" in capsys.readouterr().err
    closed = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = closed.server_address[1]
    closed.server_close()  # nothing listens there now
    assert main(["bundle", str(tmp_path / "c"), "--k3s-release-url", f"http://127.0.0.1:{port}/r"]) == 6
    assert f"downloading http://127.0.0.1:{port}/r/" in capsys.readouterr().err


def test_an_existing_bundle_is_never_overwritten(site, tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.yml").write_text("format: 1\n")
    with pytest.raises(BundleError, match="not empty"):
        make_bundle(tmp_path / "b", k3s_release_url=site["releases"], toolkit_repo_url=site["repo"])
    assert (tmp_path / "b" / "manifest.yml").read_text() == "format: 1\n"


def test_packages_index_parsing_keeps_continuation_lines():
    index = "Package: a\nVersion: 1-1\nDescription: x\n more\n\nPackage: b\nVersion: 2-1\n"
    assert list(stanzas(index)) == [{"Package": "a", "Version": "1-1", "Description": "x\nmore"},
                                    {"Package": "b", "Version": "2-1"}]
    with pytest.raises(BundleError, match="lacks Filename or SHA256"):
        pick_packages("Package: a\nVersion: 1-1\nArchitecture: amd64\n", ["a"], "1-1", "amd64", "idx")
