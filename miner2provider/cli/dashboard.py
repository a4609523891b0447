"""``m2p dashboard``: the fleet's web page and JSON API (miner2provider.dashboard), served until Ctrl-C."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

import click

from miner2provider.alerts import config as alert_file
from miner2provider.alerts.rules import state_from_json, state_json
from miner2provider.alerts.service import Alerting
from miner2provider.core import checks, private, textfiles
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.dashboard import kube_sweep
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.collect import sweep
from miner2provider.dashboard.history import DEFAULT_PATH, History, LatestReports
from miner2provider.dashboard.uptime import UptimeLog
from miner2provider.dashboard.wallet_view import recording
from miner2provider.detect.report import RigReport
from miner2provider.detect.ssh import SshOptions
from miner2provider.market import of_farm, pricing
from miner2provider.market.base import ProviderState
from miner2provider.market.wallet import WalletRead, WalletReader
from miner2provider.rigside.kube import KubeClient
from miner2provider.timeshare import economics as economics_file
from miner2provider.timeshare.model import duration_seconds

from . import render
from .app import cli
from .options import inventory_option, limit_option, load_inventory, ssh_options, vault_option
from .provider import ingress_of, read_provider

MAX_TOKEN_FILE = 4 << 10


DEFAULT_TOKEN_FILE = DEFAULT_PATH.parent / "dashboard-token"


def read_token(path: str) -> str:
    """The first line of the token file; at least 16 characters (it guards the fleet's actions); the file
    only this user's (0600: anyone who reads it can revert the farm)."""
    try:
        private.check_private_file(Path(path))
    except FileNotFoundError:
        raise UsageError("the token file does not exist", where=path) from None
    raw = textfiles.read_bytes(path, "token file", UsageError, limit=MAX_TOKEN_FILE)
    token = textfiles.decode(raw, "token file", path, UsageError).partition("\n")[0].strip()
    if len(token) < 16:
        raise UsageError("the token is shorter than 16 characters: write a long random one "
                         "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')", where=f"{path}:1")
    return token


def default_token() -> tuple[str, Path]:
    """The dashboard's own token: made on first start (0600 in a 0700 folder), read after."""
    path = DEFAULT_TOKEN_FILE
    if not (path.exists() or path.is_symlink()):
        private.write_private(path, (secrets.token_urlsafe(32) + "\n").encode())
    return read_token(str(path)), path


@cli.command("dashboard")
@inventory_option()
@limit_option
@vault_option
@ssh_options
@click.option("--port", type=click.IntRange(1, 65535), default=8477, show_default=True)
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to serve on; any but loopback needs --tls-cert and --tls-key (or --insecure-http).")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="A file (0600) whose first line is the token the page asks for and API clients send as "
                   "Bearer (default: one made on first start, ~/.local/share/m2p/dashboard-token).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Serve HTTPS with this certificate (PEM; with --tls-key).")
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The certificate's private key (PEM).")
@click.option("--insecure-http", metavar="REASON", default=None,
              help="Serve plain HTTP beyond loopback anyway, saying why (e.g. 'an SSH tunnel only').")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="The history database (default ~/.local/share/m2p/history.sqlite3).")
@click.option("--economics", "economics_path", type=click.Path(dir_okay=False), default=None,
              help="Prices and mining revenue for the earnings estimates (docs: the economics file).")
@click.option("--interval", default="5m", show_default=True, metavar="DURATION",
              help="How often the rigs are swept over SSH (90s, 5m, 1h); 0: once at start.")
@click.option("--kube-api", "kube_api", default=None, metavar="URL",
              help="Also read the agents' modes from this Kubernetes API (https://SERVER:6443) every --interval.")
@click.option("--kube-token-file", type=click.Path(dir_okay=False), default=None,
              help="A token that may list nodes (with --kube-api).")
@click.option("--kube-ca", type=click.Path(dir_okay=False), default=None,
              help="The API server's CA certificate (k3s keeps it as server/tls/server-ca.crt in its data dir).")
@click.option("--provider", "provider_path", type=click.Path(dir_okay=False), default=None,
              help="The farm's provider file (m2p provider init): the page shows the provider's own status, asked "
                   "every --interval.")
@click.option("--provider-status-url", default=None, metavar="URL",
              help="Where the provider answers its status (default: https://<ingress rig>:8443/status).")
@click.option("--alerts", "alerts_path", type=click.Path(dir_okay=False), default=None,
              help="An alert file (docs/alerts.md): judge its rules after every sweep and send to its receivers.")
def dashboard_command(inventory_file: str, limit: str | None, vault_password_file: str | None, ssh: SshOptions,
                      port: int, bind: str, token_file: str | None, tls_cert: str | None, tls_key: str | None,
                      insecure_http: str | None, db_path: str | None,
                      economics_path: str | None, interval: str, kube_api: str | None, kube_token_file: str | None,
                      kube_ca: str | None, provider_path: str | None, provider_status_url: str | None,
                      alerts_path: str | None) -> None:
    """Serve the fleet's page: each rig's mode, hours leased and mined, earnings, and actions (plan first,
    then confirm).  Sweeps the rigs every --interval into the history database."""
    import uvicorn

    from miner2provider.dashboard.app import DashboardConfig, create_app  # web libraries load only here
    from miner2provider.dashboard.limits import KEEP_ALIVE_S, MAX_CONNECTIONS, HeaderDeadline

    if bool(tls_cert) != bool(tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if not checks.is_loopback(bind) and not tls_cert and not (insecure_http or "").strip():
        raise UsageError(f"--bind {textfiles.shown(bind)} serves beyond this machine: give --tls-cert and --tls-key "
                         "(the token and the session would cross the network in clear), or --insecure-http REASON")
    interval_s = 0.0 if interval.strip() == "0" else duration_seconds(interval)
    if interval_s is None or not (interval_s == 0 or 10 <= interval_s <= 86_400):
        raise UsageError(f"--interval {textfiles.shown(interval)}: a duration from 10s to 1d (or 0)")
    if kube_api is not None and not (checks.is_api_server(kube_api) and kube_token_file):
        raise UsageError(f"--kube-api {textfiles.shown(kube_api)}: give https://HOST:PORT and --kube-token-file")
    token, token_path = (read_token(token_file), Path(token_file)) if token_file else default_token()
    econ = pricing.load_checked(economics_path) if economics_path else economics_file.NONE
    hosts = load_inventory(inventory_file, vault_password_file).select(limit)
    db = Path(db_path) if db_path else DEFAULT_PATH
    History(db).close()  # a bad or newer database is refused now, not in the page
    alerting = Alerting(alert_file.load(alerts_path)) if alerts_path else None
    if alerting is not None:  # what already fired before a restart is not said again
        with History(db) as history:
            alerting.state = state_from_json(history.alert_state())
    latest = LatestReports()  # the pages' and the alerts' both
    sweep_hosts = judged_sweep(db, ssh, alerting, {h.name: h.node_name for h in hosts}, latest)

    def redetect(rig: str) -> str:
        (report,) = sweep_hosts([h for h in hosts if h.name == rig])
        return f"{rig}: read" if report.ok else f"{rig}: {report.error}"

    def sweep_api(chosen: list[Host]) -> int:
        if kube_api is None or kube_token_file is None:
            return 0
        with History(db) as history:
            return kube_sweep.collect(history, KubeClient(kube_api, kube_token_file, kube_ca, timeout_s=20),
                                      rigs={h.node_name: h.name for h in chosen})  # the inventory's word

    provider_status = _provider_status(provider_path, provider_status_url, hosts) if provider_path else None
    if alerting is not None and provider_status is not None:
        provider_status = alerting.watching(provider_status)
    wallet_read = _wallet_read(provider_path) if provider_path else None
    if wallet_read is not None:  # each read's leases' withdrawn amounts kept: the books' payments are their changes
        wallet_read = recording(db, wallet_read)
    if alerting is not None and wallet_read is not None:
        wallet_read = alerting.watching_wallet(wallet_read)
    # each read of the provider's status leaves an up/down sample beside the history: the page's 7-day uptime
    uptime = UptimeLog(db.with_name(f"{db.stem}-uptime.sqlite3")) if provider_status is not None else None
    secrets = tuple(s for h in hosts for s in h.secrets().values())
    actions = Actions(Fleet(inventory_file, ssh, vault_password_file, secrets, redetect))
    app = create_app(DashboardConfig(db, hosts, econ, actions, sweep_hosts, sweep_api, interval_s, token,
                                hosts_allowed=frozenset({"127.0.0.1", "localhost", "::1", bind})
                                if checks.is_loopback(bind) else None, provider_status=provider_status,
                                provider_label=of_farm(h.vars for h in hosts).label if provider_path else "",
                                alert_outbox=alerting.outbox if alerting is not None else None,
                                latest_reports=latest),
                     wallet_read=wallet_read, uptime=uptime)
    shown = f"[{bind}]" if ":" in bind else bind
    scheme = "https" if tls_cert else "http"
    render.echo(f"m2p dashboard: {scheme}://{shown}:{port}/ ({render.counted(len(hosts), 'rig')}, history {db}); "
                f"sign in with the token in {token_path}; Ctrl-C stops it")
    uvicorn.Server(uvicorn.Config(
        app, host=bind, port=port, log_level="warning", http=HeaderDeadline, ssl_certfile=tls_cert,
        ssl_keyfile=tls_key, limit_concurrency=MAX_CONNECTIONS, timeout_keep_alive=int(KEEP_ALIVE_S),
        server_header=False)).run()


def judged_sweep(db: Path, ssh: SshOptions, alerting: Alerting | None, nodes: dict[str, str],
                 latest: LatestReports) -> Callable[[list[Host]], list[RigReport]]:
    """The dashboard's sweep: the chosen rigs read into the history, then (with --alerts) the rules judged on every
    rig's latest report (``nodes``: rig -> Kubernetes node), read through ``latest``, so that only the reports this
    sweep stored are decoded again (1,000 rigs a sweep otherwise, besides the pages' own decoding)."""
    def sweep_hosts(chosen: list[Host]) -> list[RigReport]:
        with History(db) as history:
            reports = sweep(history, chosen, ssh)
            if alerting is not None:
                alerting.sweep_done(nodes, latest.read(history))
                history.save_alert_state(state_json(alerting.state), time.time())
            return reports
    return sweep_hosts


def _provider_status(path: str, url: str | None, hosts: list[Host]) -> Callable[[], ProviderState]:
    """Asks the marketplace's provider for its status (the ingress rig of the provider file, or ``url``)."""
    market, provider = read_provider(path)
    address = "" if url else ingress_of(provider, hosts).address
    return lambda: market.provider_status(provider, address, url)


def _wallet_read(path: str) -> Callable[[], WalletRead] | None:
    """The provider's wallet and leases on the chain, where the marketplace reads them and the provider file names
    a node that answers them (None otherwise: the page shows no wallet)."""
    market, provider = read_provider(path)
    return market.wallet_reader(provider) if isinstance(market, WalletReader) else None
