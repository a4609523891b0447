"""The miner's measured hashrate (agent/measure.py) and the quote built on it (timeshare/profit.py).

The stats files are shaped as HiveOS's agent writes /run/hive/last_stat.json (hive/bin/agent: the stats
request, ``params`` with the rig's id and password, temp/fan/power arrays and the miner's h-stats.sh
``stats``; T-Rex's h-stats.sh gives ``hs`` in H/s with ``hs_units: "hs"``)."""

from __future__ import annotations

import json

import pytest

from miner2provider.agent import measure
from miner2provider.timeshare import economics, profit


def last_stat(miner_stats, power=(240, 238)) -> str:
    return json.dumps({"method": "stats", "params": {
        "v": 1, "rig_id": "10101", "passwd": "1q2w3e4r", "meta": None, "temp": [61, 58], "fan": [70, 65],
        "power": list(power), "df": "3.1G", "mem": [7902, 6120], "cpuavg": [0.31, 0.4, 0.38], "miner": "t-rex",
        "miner_stats": miner_stats, "total_khs": 62000}})


TREX = {"ver": "0.26.8", "hs": [31000000, 31000000], "hs_units": "hs", "temp": [61, 58], "fan": [70, 65],
        "uptime": 5400, "ar": [120, 0], "bus_numbers": [1, 3], "algo": "kawpow"}


@pytest.mark.parametrize(("stats", "power", "expected"), [
    (TREX, (240, 238), measure.Sample("kawpow", (31.0, 31.0), (240.0, 238.0))),
    ({**TREX, "hs": [95.5, 96.1], "hs_units": "mhs", "algo": "etchash"}, (240, 238),
     measure.Sample("etchash", (95.5, 96.1), (240.0, 238.0))),
    ({"hs": [62000, 61000], "algo": "kawpow"}, (240, 238), measure.Sample("kawpow", (62.0, 61.0), (240.0, 238.0))),
    (TREX, (), measure.Sample("kawpow", (31.0, 31.0), ())),  # no power array: the file's watts are used
    (TREX, (240,), measure.Sample("kawpow", (31.0, 31.0), ())),  # one power figure for two GPUs: not paired
])
def test_hiveos_stats_give_each_gpus_hashrate_in_mhs_and_its_watts(stats, power, expected):
    assert measure.hiveos_stats(last_stat(stats, power)) == expected


@pytest.mark.parametrize("text", [
    last_stat(None),  # no miner running: HiveOS writes stats null
    last_stat({**TREX, "hs": []}),
    last_stat({**TREX, "hs_units": "parsecs"}),
    last_stat({**TREX, "hs": [1, "NaN"]}),
    last_stat({**TREX, "hs": [-5, 3]}),
    last_stat(TREX)[:80],  # torn while HiveOS rewrote it
    "", "[]", '{"params": 3}',
])
def test_no_sample_from_a_stopped_miner_or_a_broken_file(text):
    assert measure.hiveos_stats(text) is None


def test_nothing_but_hashrates_and_watts_leaves_the_file():
    sample = measure.hiveos_stats(last_stat(TREX))
    assert sample is not None
    assert "1q2w3e4r" not in json.dumps(measure.update(None, sample, 0.0).as_status())


def test_the_average_follows_new_samples_and_restarts_on_a_new_algorithm():
    avg = measure.update(None, measure.Sample("kawpow", (30.0,), (240.0,)), 0.0)
    for t in range(1, 60):
        avg = measure.update(avg, measure.Sample("kawpow", (40.0,), (250.0,)), float(t))
    assert avg.mhs[0] == pytest.approx(40.0, abs=0.1) and avg.watts[0] == pytest.approx(250.0, abs=0.1)
    assert avg.samples == 60 and avg.at == 59.0
    one = measure.update(avg, measure.Sample("kawpow", (0.0,), (250.0,)), 60.0)  # one bad reading moves it a tenth
    assert one.mhs[0] == pytest.approx(36.0, abs=0.1)
    other = measure.update(avg, measure.Sample("etchash", (90.0,), ()), 61.0)
    assert other == measure.Average("etchash", (90.0,), (), 61.0, 1)


FIGURES = economics.parse("""\
lease_price_per_gpu_hour: {rtx3090: 0.30}
mining_revenue_per_gpu_day: {rtx3090: 2.40}
gpu_power_watts: {default: 250}
power_price_per_kwh: 0.20
mining_revenue_per_mhs_day: {kawpow: 0.12}
""")


def test_a_measured_hashrate_replaces_the_per_gpu_figure_and_says_so():
    # 31 MH/s x 0.12 = 3.72 a day = 0.155/h; power 240 W x 0.20 = 0.048/h: floor 0.048 + 0.107 = 0.155 per GPU
    q = profit.quote({"rtx3090": 2}, FIGURES, ("kawpow", (31.0, 31.0), (240.0, 240.0)))
    assert q.source == "measured kawpow hashrate of 2 GPUs" and q.lease_per_hour == pytest.approx(0.60)
    assert q.floor_per_hour == pytest.approx(2 * 0.155)
    no_watts = profit.quote({"rtx3090": 2}, FIGURES, ("kawpow", (31.0, 31.0), ()))  # the file's 250 W
    assert no_watts.floor_per_hour == pytest.approx(2 * (0.05 + (3.72 / 24 - 0.05)))
    unknown_algo = profit.quote({"rtx3090": 2}, FIGURES, ("etchash", (95.0, 95.0), (240.0, 240.0)))
    assert unknown_algo.source == "economics file (no mining_revenue_per_mhs_day for the measured etchash)"
    assert unknown_algo.floor_per_hour == pytest.approx(0.20)  # the per-GPU figure
    no_price = profit.quote({"a4000": 1}, FIGURES, ("kawpow", (31.0,), ()))
    assert no_price.lease_per_hour is None and "lease_price_per_gpu_hour for a4000" in no_price.missing


TREX_SUMMARY = {"accepted_count": 120, "algorithm": "kawpow", "api": "3.7", "hashrate": 116000000,
                "gpus": [{"device_id": 0, "gpu_id": 0, "hashrate": 58000000, "power": 170, "name": "RTX 3060"},
                         {"device_id": 1, "gpu_id": 1, "hashrate": 58000000, "power": 172, "name": "RTX 3060"}],
                "name": "t-rex", "version": "0.26.8"}


@pytest.mark.parametrize(("summary", "expected"), [
    (TREX_SUMMARY, measure.Sample("kawpow", (58.0, 58.0), (170.0, 172.0))),
    ({**TREX_SUMMARY, "gpus": [{"hashrate": 58000000}, {"hashrate": 57000000, "power": 170}]},
     measure.Sample("kawpow", (58.0, 57.0), ())),  # power not given for every card: none paired
    ({**TREX_SUMMARY, "gpus": []}, None),  # starting up: no GPU hashing yet
    ({**TREX_SUMMARY, "algorithm": None}, None),
    ({**TREX_SUMMARY, "gpus": [{"power": 170}]}, None),  # no hashrate: not T-Rex's summary
    ({"status": "ok"}, None),
])
def test_trex_summary_gives_each_gpus_hashrate_and_power(summary, expected):
    assert measure.trex_summary(json.dumps(summary)) == expected


def test_an_empty_or_foreign_answer_is_no_sample():
    assert measure.trex_summary("") is None and measure.trex_summary("<html>") is None
    assert measure.trex_summary("[1, 2]") is None
