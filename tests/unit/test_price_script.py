"""The bids m2p's price mappings make, computed by Akash's own bid script (scripts/price_script_generic.sh,
read from the provider chart archive in ../shared/akash, run with bash, jq and bc as the provider runs it):
an order for each model the farm has bids its floor, an order that names only the model bids at least every
floor of that model, and a model the farm lacks bids the map's highest price (or 100).

Two changes to the script as run here, both so that no test reaches the internet: its AKT price cache
(/tmp/aktprice.cache, fixed in the script) is a file of the test's own, fresh, and ``curl`` on PATH is a
stand-in that fails.  The orders ask in ``uact`` (USD), whose rate does not use the AKT price at all.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from m2p_sandbox import helm
from miner2provider.market.akash import charts, stack
from miner2provider.market.akash.provider_file import CHARTS
from miner2provider.market.pricing import Floor

BLOCKS_A_MONTH = 429909  # the script's
BASE_USD = 1.60 + 0.80 + 0.02  # one thread, 1 GiB of memory and 1 GiB of ephemeral storage at its defaults
FLOORS = (Floor("rtx3090", "24Gi", 4, 0.95, 300, 0.0, 0.05), Floor("rtx3080", "10Gi", 2, 0.6, 250, 0.0, 0.03),
          Floor("rtx3080", "12Gi", 1, 0.7, 250, 0.0, 0.04), Floor("cmp90hx", "10Gi", 8, 0.5, 220, 0.0, 0.02))


@pytest.fixture(scope="module")
def bid(tmp_path_factory):
    folder = helm.chart_folder(tmp_path_factory.mktemp("charts"))
    script = charts.load(folder, CHARTS).price_script
    work = tmp_path_factory.mktemp("bid")
    cache = work / "aktprice.cache"
    assert "/tmp/aktprice.cache" in script
    (work / "price_script.sh").write_text(script.replace("/tmp/aktprice.cache", str(cache)))
    (work / "bin").mkdir()
    (work / "bin" / "curl").write_text("#!/bin/sh\necho 'curl: STAND-IN, no network in tests' >&2\nexit 7\n")
    (work / "bin" / "curl").chmod(0o755)
    ours = stack.price_mappings(FLOORS)

    def run(gpu: dict[str, str], mappings: str = ours) -> float:
        cache.write_text("0.75\n")  # fresh: the script reads it instead of asking an API
        order = {"price": {"denom": "uact", "amount": "1000000000"}, "resources": [{
            "count": 1, "cpu": 1000, "memory": 1 << 30, "storage": [{"class": "ephemeral", "size": 1 << 30}],
            "endpoint_quantity": 0, "gpu": {"units": 1, "attributes": {"vendor": {"nvidia": gpu}}}}]}
        done = subprocess.run(["bash", str(work / "price_script.sh")], input=json.dumps(order), capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}",
                                                          "PRICE_TARGET_GPU_MAPPINGS": mappings})
        assert done.returncode == 0, done.stderr
        return float(done.stdout) * BLOCKS_A_MONTH / 1e6 - BASE_USD  # the GPU's USD per month in the bid

    return run


def month(floor: Floor) -> float:
    assert floor.floor_per_month is not None
    return floor.floor_per_month


@pytest.mark.parametrize("gpu, expected", [
    ({"model": "rtx3090", "ram": "24Gi"}, month(FLOORS[0])),
    ({"model": "rtx3090", "ram": "24Gi", "interface": "pcie"}, month(FLOORS[0])),
    ({"model": "rtx3080", "ram": "10Gi"}, month(FLOORS[1])),
    ({"model": "rtx3080", "ram": "12Gi"}, month(FLOORS[2])),
    ({"model": "rtx3080"}, max(month(FLOORS[1]), month(FLOORS[2]))),  # only the model: its dearest size
    ({"model": "cmp90hx", "ram": "10Gi"}, month(FLOORS[3])),
    ({"model": "a100", "ram": "80Gi"}, 100.0),  # not in the farm: the map's highest price, or 100
])
def test_each_order_bids_what_m2ps_mappings_say(bid, gpu, expected):
    assert bid(gpu) == pytest.approx(expected, abs=0.05)


def test_the_consoles_star_mapping_is_no_wildcard(bid):
    """Why m2p writes every model: the Provider Console's ``*=X`` bids the map's highest price, or 100."""
    assert bid({"model": "rtx3090", "ram": "24Gi"}, "*=50") == pytest.approx(100.0, abs=0.05)
    assert bid({"model": "rtx3090", "ram": "24Gi"}, "*=150") == pytest.approx(150.0, abs=0.05)
