"""`m2p bundle DIR` against a vendor site served on loopback.

The site is laid out like the real ones (a k3s release directory with its
sha256sum-amd64.txt; NVIDIA's flat apt repository with a Packages index), and serves
the stand-in k3s and toolkit .debs of the test bundle: the vendors are unreachable here.
It serves the provider's files too: Akash's charts and CRDs and cert-manager's chart as
../shared/akash keeps them, and NGINX Gateway Fabric's chart from the STAND-IN registry (as
`helm push` keeps one), each pinned by the TEST's table (``site["pins"]``).  Those archives
are not the published bytes: the digests Akash publishes refuse them.
"""

import dataclasses
import functools
import gzip
import hashlib
import http.server
import io
import shutil
import tarfile

import pytest

from m2p_sandbox import bundle as standin
from m2p_sandbox import helm
from m2p_sandbox.registry import RegistryStandin
from m2p_sandbox.served import serve_in_background
from miner2provider.cli import main
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import charts, images, pins
from miner2provider.fleet.bundle.download import make_bundle, pick_packages, stanzas
from miner2provider.fleet.bundle.manifest import load_bundle
from miner2provider.market.akash import charts as provider_charts
from miner2provider.market.akash import provider_file

VERSION = standin.TOOLKIT_VERSION
NGF, CERT_MANAGER = "nginx-gateway-fabric-2.5.1.tgz", "cert-manager-v1.19.1.tgz"
NGF_CHART = "nginx/charts/nginx-gateway-fabric"  # where NGF's release workflow pushes it, in its images' registry
# What m2p pins (issue 52): Akash's chart repository index (helm-charts gh-pages @ 3cc0711) and the Gateway API's
# v1.5.1 experimental-install.yaml.
PUBLISHED = {
    "provider-19.0.2.tgz": "fd4d5d8e7c1e5ef589d4c3ee3c1269b17f3a28a9ee3e73fc4197879d223e6a13",
    "akash-hostname-operator-19.0.2.tgz": "babfd36e0b0f37cd6581c797fac0b6256c1c8572cf072c57ab25ee5737be80b4",
    "akash-inventory-operator-19.0.2.tgz": "f777a5bf0dfebec76ece4cde483c7417623763b9b25bbf2ce6c66f1fb61beec1",
    "akash-gateway-1.2.1.tgz": "18695126b6e818a60e235232bd6b4bebd00509a6a24e437e3667e420a58731e8",
    "gateway-api-crds.yaml": "64ec76609a6ac885e0405dea79ca509c229fa019d342f0857aa8b6bdc8b8ba92",
}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def with_values(archive, values):
    """``archive`` (a chart .tgz) with its values.yaml replaced."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else b""
            if member.name.endswith("/values.yaml") and member.name.count("/") == 1:
                data, member.size = values, len(values)
            dst.addfile(member, io.BytesIO(data))
    return gzip.compress(out.getvalue(), mtime=0)


def packages_entry(deb, name, version):
    data = deb.read_bytes()
    return (f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: NVIDIA\n"
            f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
            "Description: NVIDIA container toolkit\n multi-line description, continued\n")


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A loopback HTTP server with releases/<k3s version>/, toolkit/amd64/Packages and charts/, and the stand-in
    registry with every image those name and NGF's chart."""
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
    folder = helm.chart_folder(root / "charts")
    ngf = (folder / NGF).read_bytes()
    (folder / NGF).unlink()  # NGF keeps its chart only in its registry
    ngf_values = charts.chart_values(ngf, NGF)
    (root / "ngf").mkdir()
    (root / "ngf" / "values.yaml").write_bytes(ngf_values)
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serve_in_background(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    named = [pins.DEVICE_PLUGIN_IMAGE, *(i for a in helm.shared_charts().glob("*.tgz") for i in chart_images(a.name))]
    refs = [images.parse_ref(i) for i in named]
    registry = RegistryStandin(sorted({f"{r.repository}:{r.reference}" for r in refs}))
    standin.push_chart(registry, NGF_CHART, ngf)
    standin.push_chart(registry, f"{NGF_CHART}-altered", with_values(ngf, ngf_values + b"# altered\n"))
    table = [charts.Pinned(file=p.name, version="test", url=f"{base}/charts/{p.name}", sha256=sha256(p.read_bytes()),
                           source="the test's table", extra="cert-manager" if p.name == CERT_MANAGER else "")
             for p in sorted(folder.iterdir())]
    table.append(charts.Pinned(file=NGF, version="2.5.1", url=f"oci://{{registry}}/{NGF_CHART}:2.5.1",
                               caveat="no published digest (the test's words)", values_url=f"{base}/ngf/values.yaml",
                               values_sha256=sha256(ngf_values)))
    yield {"root": root, "releases": f"{base}/releases", "repo": f"{base}/toolkit/$(ARCH)", "base": base,
           "registry": registry.url, "hosts": sorted({r.registry for r in refs}), "pins": table}
    server.shutdown()
    registry.close()


@pytest.fixture(autouse=True)
def provider_pins(site, monkeypatch):
    """The marketplace's files are the test's table (its digests are the test data's, never the real pins')."""
    monkeypatch.setattr(charts, "marketplace_files", lambda: list(site["pins"]))


def use_pins(monkeypatch, table):
    monkeypatch.setattr(charts, "marketplace_files", lambda: table)


def chart_images(name):
    return charts.chart_images((helm.shared_charts() / name).read_bytes(), name)


def args(site, directory):
    registries = [a for host in site["hosts"] for a in ("--image-registry", f"{host}={site['registry']}")]
    return ["bundle", str(directory), "--k3s-release-url", site["releases"], "--toolkit-repo-url", site["repo"],
            *registries]


def nothing_left(tmp_path):
    return not (tmp_path / "b").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".m2p-bundle-")]


def test_bundle_downloads_checks_and_loads(site, tmp_path, capsys):
    assert main(args(site, tmp_path / "b")) == 0
    out, err = capsys.readouterr()
    assert "bundle ready" in out and f"provider charts: {tmp_path / 'b' / 'charts'}" in out
    assert f"warning: {NGF}: no published digest (the test's words)" in err  # said every time
    b = load_bundle(tmp_path / "b")
    assert b.standin is False and b.k3s.version == standin.K3S_VERSION
    assert [(a.name, a.version) for a in b.toolkit_packages] == [
        ("libnvidia-container1", f"{VERSION}-1"), ("libnvidia-container-tools", f"{VERSION}-1"),
        ("nvidia-container-toolkit-base", f"{VERSION}-1"), ("nvidia-container-toolkit", f"{VERSION}-1")]
    assert (tmp_path / "b" / "k3s" / "k3s").stat().st_mode & 0o111
    assert [(a.name, a.version, a.path.name) for a in b.images[:2]] == [
        ("k3s-airgap-images", standin.K3S_VERSION, "k3s-airgap-images-amd64.tar.zst"),
        (pins.DEVICE_PLUGIN_IMAGE, pins.DEVICE_PLUGIN_IMAGE.rsplit(":", 1)[1], "k8s-device-plugin-v0.20.0.oci.tar")]
    assert b.missing_images(pins.IMAGES) == []
    assert images.archive_image_names(b.images[1].path) == [pins.DEVICE_PLUGIN_IMAGE]
    # The provider's files, for `provider apply --charts`: all but the optional cert-manager, and what they run.
    carried = sorted(p.file for p in site["pins"] if not p.extra)
    assert sorted(a.name for a in b.charts) == sorted(p.name for p in (tmp_path / "b" / "charts").iterdir()) == carried
    provider, ngf = chart_images("provider-19.0.2.tgz"), chart_images(NGF)
    assert [a.name for a in b.images[2:]] == provider + ngf
    for a in b.images[2:]:
        assert images.archive_image_names(a.path) == [a.name]
    provider_charts.load(tmp_path / "b" / "charts", provider_file.CHARTS)  # what provider apply reads


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
    assert nothing_left(tmp_path)


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
    assert main(["bundle", str(tmp_path / "c"), "--k3s-release-url", f"http://127.0.0.1:{port}/r", "--no-provider"]) == 6
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


def test_cert_manager_and_its_images_only_when_asked(site, tmp_path, capsys):
    assert main([*args(site, tmp_path / "b"), "--provider-extra", "cert-manager"]) == 0
    b = load_bundle(tmp_path / "b")
    assert CERT_MANAGER in [a.name for a in b.charts]
    wanted = chart_images(CERT_MANAGER)
    assert [a.name for a in b.images if a.name in wanted] == wanted
    without = {a.name for a in load_bundle(make(site, tmp_path / "c")).images}
    assert CERT_MANAGER not in [a.name for a in load_bundle(tmp_path / "c").charts] and not without & set(wanted)


def make(site, root, **kwargs):
    make_bundle(root, k3s_release_url=site["releases"], toolkit_repo_url=site["repo"],
                registry_urls=dict.fromkeys(site["hosts"], site["registry"]),
                provider_files=charts.select(site["pins"], ()), **kwargs)
    return root


def test_the_published_digests_refuse_the_test_archives(site, tmp_path, monkeypatch, capsys):
    """../shared/akash's archives were packaged again, so they are not the bytes Akash published: the real pins
    refuse each, naming it; the Gateway API's file is the release's own bytes and passes."""
    published = [dataclasses.replace(p, sha256=PUBLISHED[p.file], source="Akash's chart repository index")
                 if p.file in PUBLISHED else p for p in site["pins"]]
    for pin in published:
        data = (site["root"] / "charts" / pin.file).read_bytes() if pin.file in PUBLISHED else b""
        if pin.file == "gateway-api-crds.yaml":
            charts.check(pin, data, "url")
        elif pin.file in PUBLISHED:
            with pytest.raises(BundleError, match=rf"^{pin.file} from url: sha256 {sha256(data)[:12]}… but Akash's "
                                                  rf"chart repository index lists {pin.sha256[:12]}…: not the "
                                                  rf"published file .* nothing was written. .*--chart-url {pin.file}="):
                charts.check(pin, data, "url")
    use_pins(monkeypatch, published)
    assert main(args(site, tmp_path / "b")) == BundleError.exit_code
    err = capsys.readouterr().err
    assert f"akash-gateway-1.2.1.tgz from {site['base']}/charts/akash-gateway-1.2.1.tgz: sha256 " in err
    assert f"lists {PUBLISHED['akash-gateway-1.2.1.tgz'][:12]}…" in err and len(err.strip().splitlines()) == 1
    assert nothing_left(tmp_path)


def test_a_one_byte_change_is_refused_naming_the_file(site, tmp_path, capsys):
    served = site["root"] / "charts" / "provider-19.0.2.tgz"
    good = served.read_bytes()
    served.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    try:
        assert main(args(site, tmp_path / "b")) == BundleError.exit_code
    finally:
        served.write_bytes(good)
    err = capsys.readouterr().err
    assert f"provider-19.0.2.tgz from {site['base']}/charts/provider-19.0.2.tgz: sha256 " in err
    assert f"the test's table lists {sha256(good)[:12]}…" in err and "nothing was written" in err
    assert nothing_left(tmp_path)


def test_ngf_chart_must_hold_the_released_values(site, tmp_path, monkeypatch, capsys):
    """No digest of NGF's chart can be read outside its registry: its values.yaml (the images it runs, the
    registry it names) is pinned instead, and a chart with other values is refused."""
    ngf = next(p for p in site["pins"] if p.file == NGF)
    others = [p for p in site["pins"] if p.file != NGF]
    use_pins(monkeypatch, [*others, dataclasses.replace(ngf, url=ngf.url.replace(":2.5.1", "-altered:2.5.1"))])
    assert main(args(site, tmp_path / "b")) == BundleError.exit_code
    err = capsys.readouterr().err
    assert f"{NGF}: the values.yaml of oci://" in err and "-altered:2.5.1 has sha256" in err
    assert "not the chart as released; nothing was written" in err and nothing_left(tmp_path)
    use_pins(monkeypatch, [*others, dataclasses.replace(ngf, values_sha256="0" * 64)])
    assert main(args(site, tmp_path / "b")) == BundleError.exit_code
    assert f"{NGF}: {site['base']}/ngf/values.yaml has sha256 " in capsys.readouterr().err
    assert nothing_left(tmp_path)


def test_a_mirror_for_a_file_and_the_options_mistakes(site, tmp_path, capsys):
    mirror = site["root"] / "mirror"
    mirror.mkdir(exist_ok=True)
    shutil.copy(site["root"] / "charts" / "akash-crd.yaml", mirror / "crd.yaml")
    assert main([*args(site, tmp_path / "b"), "--chart-url", f"akash-crd.yaml={site['base']}/mirror/crd.yaml"]) == 0
    assert main([*args(site, tmp_path / "c"), "--chart-url", f"nope.yaml={site['base']}/x"]) == BundleError.exit_code
    assert "--chart-url nope.yaml: not a file of the provider's (akash-crd.yaml, " in capsys.readouterr().err
    assert main([*args(site, tmp_path / "c"), "--provider-extra", "nope"]) == BundleError.exit_code
    assert "--provider-extra nope: the marketplace's provider has no such part (it has: cert-manager)" in \
        capsys.readouterr().err
    assert main([*args(site, tmp_path / "c"), "--no-provider", "--provider-extra", "cert-manager"]) == 2
    assert main([*args(site, tmp_path / "c"), "--chart-url", "akash-crd.yaml"]) == 2
    assert "--chart-url akash-crd.yaml: give FILE=URL" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_without_the_provider_the_bundle_is_what_convert_installs(site, tmp_path):
    assert main([*args(site, tmp_path / "b"), "--no-provider"]) == 0
    b = load_bundle(tmp_path / "b")
    assert b.charts == () and [a.name for a in b.images][1:] == [pins.DEVICE_PLUGIN_IMAGE]
    assert not (tmp_path / "b" / "charts").exists()


def test_provider_fetch_gets_the_charts_alone_checked_for_provider_apply(site, tmp_path, capsys):
    """`m2p provider fetch`: a connected controller gets the chart folder without k3s, the toolkit or images."""
    registries = [a for host in site["hosts"] for a in ("--image-registry", f"{host}={site['registry']}")]
    assert main(["provider", "fetch", str(tmp_path / "charts"), *registries]) == 0
    out, err = capsys.readouterr()
    assert f"m2p provider apply --charts {tmp_path / 'charts'}" in out
    assert f"warning: {NGF}: no published digest (the test's words)" in err
    carried = sorted(p.file for p in site["pins"] if not p.extra)
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == carried
    provider_charts.load(tmp_path / "charts", provider_file.CHARTS)  # what provider apply reads
    assert [p.name for p in tmp_path.iterdir()] == ["charts"]  # nothing staged is left beside it
    # A file that is not its pin: refused, nothing left; a folder with files in it is never written into.
    archive = site["root"] / "charts" / "akash-crd.yaml"
    good = archive.read_bytes()
    archive.write_bytes(good + b"\n")
    try:
        assert main(["provider", "fetch", str(tmp_path / "again"), *registries]) == BundleError.exit_code
    finally:
        archive.write_bytes(good)
    assert "akash-crd.yaml: sha256 " in capsys.readouterr().err and not (tmp_path / "again").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["charts"]
    assert main(["provider", "fetch", str(tmp_path / "charts"), *registries]) == BundleError.exit_code
    assert "is not empty" in capsys.readouterr().err
