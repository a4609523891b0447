"""``m2p bundle``: download what convert installs, once, for offline rigs."""

from __future__ import annotations

import click

from miner2provider.core.errors import UsageError
from miner2provider.fleet.bundle import charts, pins
from miner2provider.fleet.bundle.download import make_bundle
from miner2provider.fleet.bundle.manifest import load_bundle

from . import render
from .app import Context, cli, pass_ctx


@cli.command("bundle")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--k3s-version", default=pins.K3S_VERSION, show_default=True, envvar="M2P_K3S_VERSION")
@click.option("--toolkit-version", default=pins.TOOLKIT_VERSION, show_default=True, envvar="M2P_TOOLKIT_VERSION",
              help="NVIDIA container toolkit version (packages <version>-1).")
@click.option("--k3s-release-url", default=pins.K3S_RELEASE_URL, show_default=True, envvar="M2P_K3S_RELEASE_URL",
              help="Where k3s releases are (a mirror works).")
@click.option("--toolkit-repo-url", default=pins.TOOLKIT_REPO_URL, show_default=True, envvar="M2P_TOOLKIT_REPO_URL",
              help="NVIDIA's flat apt repository ($(ARCH) is replaced by amd64; a mirror works).")
@click.option("--image", "images", multiple=True, default=pins.IMAGES, show_default=True,
              help="An image m2p's manifests name, for rigs without internet (repeat it; give yours if the "
                   "inventory sets nvidia_device_plugin_image).")
@click.option("--image-registry", "image_registries", multiple=True, metavar="HOST=URL",
              help="Pull HOST's images (and charts kept there) from URL (a mirror, or the registry's API address); "
                   "repeat it.")
@click.option("--provider/--no-provider", default=True, show_default=True,
              help="Carry the marketplace provider's charts and manifests (DIRECTORY/charts, for `m2p provider "
                   "apply --charts`), each checked against its publisher's digest, and the images they run.")
@click.option("--provider-extra", "extras", multiple=True, metavar="NAME",
              help="An optional part of the provider to carry too: cert-manager (for a DNS-01 wildcard "
                   "certificate); repeat it.")
@click.option("--chart-url", "chart_urls", multiple=True, metavar="FILE=URL",
              help="Fetch the charts folder's FILE from URL (a mirror); it is still checked against its pin.")
@pass_ctx
def bundle_command(ctx: Context, directory: str, k3s_version: str, toolkit_version: str, k3s_release_url: str,
                   toolkit_repo_url: str, images: tuple[str, ...], image_registries: tuple[str, ...],
                   provider: bool, extras: tuple[str, ...], chart_urls: tuple[str, ...]) -> None:
    """Download k3s, its air-gap images, the NVIDIA toolkit, the device plugin's image and the
    marketplace provider's charts and images once, checked by sha256, into DIRECTORY (new or empty).

    Run it on a connected machine; then `m2p convert --bundle DIRECTORY` installs from it over SSH, and
    `m2p provider apply --charts DIRECTORY/charts` takes the provider's charts from it.
    """
    registries = url_pairs("--image-registry", "HOST", image_registries)
    urls = url_pairs("--chart-url", "FILE", chart_urls)
    if not provider and (extras or urls):
        raise UsageError("--provider-extra and --chart-url need --provider (the default)")
    provider_files = charts.select(charts.marketplace_files(), extras) if provider else []
    provider_part = f", and the provider's {len(provider_files)} chart files with the images they run" \
        if provider_files else ""
    ctx.info(f"downloading k3s {k3s_version} with its air-gap images, NVIDIA container toolkit {toolkit_version}, "
             f"{', '.join(images)}{provider_part} ...")
    manifest = make_bundle(directory, k3s_version=k3s_version, toolkit_version=toolkit_version,
                           k3s_release_url=k3s_release_url, toolkit_repo_url=toolkit_repo_url,
                           images=list(images), registry_urls=registries, provider_files=provider_files,
                           chart_urls=urls)
    bundle = load_bundle(directory)  # read back: the manifest and every file check out
    render.echo(f"bundle ready: {manifest} (k3s {bundle.k3s.version}, "
                f"{len(bundle.toolkit_packages)} toolkit packages {bundle.toolkit_version}, "
                f"{len(bundle.images)} image archives, {len(bundle.charts)} provider files)")
    if bundle.charts:
        render.echo(f"provider charts: {bundle.root / charts.FOLDER} (m2p provider apply --charts that folder)")
    # What a sha256 check could not promise, said every time (the manifest keeps it too).
    render.warnings([f"{f.file}: {f.caveat}" for f in provider_files if f.caveat])


def url_pairs(option: str, key: str, given: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for pair in given:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise UsageError(f"{option} {pair}: give {key}=URL (URL starting http:// or https://)")
        found[name] = url
    return found
