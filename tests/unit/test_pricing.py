"""m2p pricing: the lease price floor per GPU from the economics file (property: leasing at the floor
pays its power and beats mining's net by the margin; an unknown figure is never guessed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from miner2provider.cli import main
from miner2provider.core.errors import EconomicsError
from miner2provider.market import pricing
from miner2provider.market.akash.prices import akash_mappings
from miner2provider.timeshare import economics

ECON = economics.parse("mining_revenue_per_gpu_day: {default: 0.40, rtx3090: 0.95}\n"
                       "gpu_power_watts: {default: 200, rtx3090: 300}\npower_price_per_kwh: 0.12\nmargin: 0.15\n")


def test_the_floor_pays_the_power_and_beats_mining_by_the_margin():
    (floor,) = pricing.floors([("rtx3090", "24Gi")] * 2, ECON)
    power = 300 / 1000 * 0.12
    assert floor.gpus == 2 and floor.net_per_hour == pytest.approx(0.95 / 24 - power)
    assert floor.floor_per_hour == pytest.approx(power + 1.15 * (0.95 / 24 - power))
    assert floor.floor_per_month == pytest.approx(floor.floor_per_hour * 730)
    assert akash_mappings([floor]) == f"rtx3090.24Gi={floor.floor_per_hour * 730:.2f}"


def test_a_model_without_a_revenue_figure_has_no_floor_and_no_mapping():
    bare = economics.parse("gpu_power_watts: {default: 200}\npower_price_per_kwh: 0.1\n")
    (floor,) = pricing.floors([("cmp90hx", "10Gi")], bare)
    assert floor.floor_per_hour is None and akash_mappings([floor]) == ""


def test_mining_at_a_loss_still_asks_the_power_back():
    (floor,) = pricing.floors([("rtx3060", "12Gi")], ECON)  # 0.40 a day, 200 W at 0.12: a loss
    assert floor.net_per_hour < 0 and floor.floor_per_hour == pytest.approx(0.2 * 0.12)


@given(st.floats(0, 50), st.floats(0, 800), st.floats(0, 2), st.floats(0, 10), st.floats(0, 10))
def test_leasing_at_the_floor_never_earns_less_than_mining(revenue, watts, kwh, margin, more_margin):
    def floor_of(m):
        econ = economics.Economics("x", "USD", {}, {"default": revenue}, {"default": watts}, kwh, m)
        return pricing.floors([("rtx3090", "24Gi")], econ)[0]

    f = floor_of(margin)
    power = watts / 1000 * kwh
    earned = f.floor_per_hour - power  # a lease at the floor, after paying its own power
    assert earned >= (1 + margin) * max(f.net_per_hour, 0) - 1e-9 and earned >= f.net_per_hour - 1e-9
    assert floor_of(margin + more_margin).floor_per_hour >= f.floor_per_hour - 1e-12


def test_the_command_prints_the_charts_mapping_and_refuses_a_bad_file(tmp_path, capsys, saved_report):
    from miner2provider.cli import main

    report = saved_report(("NVIDIA GeForce RTX 3090", "2204", 24576))
    econ = tmp_path / "econ.yml"
    econ.write_text("mining_revenue_per_gpu_day: {rtx3090: 0.95}\ngpu_power_watts: {rtx3090: 300}\n"
                    "power_price_per_kwh: 0.12\nmargin: 0.15\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ), "--format", "akash"]) == 0
    assert capsys.readouterr().out.strip() == "rtx3090.24Gi=29.29"
    econ.write_text("margin: 0.15\nmargin: 0.2\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ)]) == EconomicsError.exit_code == 7  # the code schedules use
    assert f"{econ}:2: margin is given twice" in capsys.readouterr().err


def test_measured_hashrates_price_their_model_and_say_so(tmp_path, capsys, saved_report):
    """A saved report whose rig's agent measured its miner (facts.agent_status.measured, as status.json
    carries it): with mining_revenue_per_mhs_day for the algorithm, the floor comes from the cards' own
    hashrates and watts; a rig of mixed models is not paired; an unpriced algorithm falls back."""
    import json

    from miner2provider.cli import main

    report = saved_report(("NVIDIA GeForce RTX 3090", "2204", 24576), ("NVIDIA GeForce RTX 3090", "2204", 24576))
    data = json.loads(report.read_text())
    data[0]["facts"]["agent_status"] = {"present": True, "measured": {"algo": "kawpow", "mhs": [58.0, 56.0],
                                                                       "watts": [240.0, 250.0]}}
    report.write_text(json.dumps(data))
    econ = tmp_path / "econ.yml"
    econ.write_text("mining_revenue_per_gpu_day: {rtx3090: 0.95}\ngpu_power_watts: {rtx3090: 300}\n"
                    "power_price_per_kwh: 0.12\nmining_revenue_per_mhs_day: {kawpow: 0.05}\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]
    # 58 and 56 MH/s x 0.05 = 2.90 and 2.80 a day; 240 and 250 W at 0.12: floor = revenue/24 (net > 0)
    assert row["source"] == "measured (2 GPUs)" and row["mining_per_day"] == pytest.approx(2.85)
    assert row["power_watts"] == 245.0 and row["floor_per_hour"] == pytest.approx(2.85 / 24, abs=1e-4)
    econ.write_text(econ.read_text().replace("kawpow", "etchash"))
    assert main(["pricing", "--from", str(report), "--economics", str(econ), "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]
    assert row["source"] == "economics file" and row["mining_per_day"] == 0.95


def test_measured_figures_pair_with_cards_only_on_one_model_rigs():
    from miner2provider.detect.facts.gpu import Gpu
    from miner2provider.market.cards import card_for
    from miner2provider.rigside.status import Measured

    def card(name, device, mib):
        return card_for(Gpu(0, name, "GPU-0", "00000000:01:00.0", "10de", device, "0x0", mib, "550.54"))

    rtx, cmp = card("NVIDIA GeForce RTX 3090", "2204", 24576), card("NVIDIA CMP 90HX", "2249", 10240)
    both = Measured("kawpow", (58.0, 30.0), (240.0, 250.0))
    assert pricing.measured_cards([rtx, cmp], both) == []
    assert pricing.measured_cards([rtx], both) == []  # two hashrates for one card
    (one,) = pricing.measured_cards([rtx], Measured("kawpow", (58.0,), ()))
    assert one == pricing.MeasuredCard("rtx3090", "24Gi", "kawpow", 58.0, None)


def test_a_misspelt_model_is_an_error_with_the_name_meant_not_free_power(tmp_path, capsys):
    """gpu_power_watts: {rtx3700: 130} for a farm of RTX 3070s once priced the cards as if their power were free:
    now the file is refused at the misspelt line, naming the model meant."""
    text = ("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\nmargin: 0.15\n"
            "gpu_power_watts:\n  rtx3700: 130\n")
    with pytest.raises(EconomicsError, match=r"econ.yml:5: rtx3700 is not a GPU model m2p knows.*did you mean "
                                             r"rtx3070\?"):
        pricing.check_models(economics.parse(text, "econ.yml"), {"rtx3070"})
    right = pricing.check_models(economics.parse(text.replace("rtx3700", "rtx3070"), "econ.yml"), {"rtx3070"})
    (floor,) = pricing.floors([("rtx3070", "8Gi")], right)
    # 130 W at 0.12 a kWh is 0.0156 an hour; mining nets 0.40 / 24 - 0.0156; the floor adds 15 % of that net
    assert round(floor.floor_per_month or 0, 2) == round((0.0156 + 1.15 * (0.40 / 24 - 0.0156)) * 730, 2) == 12.28


def test_every_farm_model_needs_its_power_when_power_has_a_price(tmp_path):
    econ = economics.parse("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\n"
                           "gpu_power_watts:\n  rtx3090: 300\n", "econ.yml")
    with pytest.raises(EconomicsError, match=r"econ.yml:4: gpu_power_watts has no figure for rtx3070 \(cards this "
                                             r"farm has\) and no default"):
        pricing.check_models(econ, {"rtx3070", "rtx3090"})
    pricing.check_models(econ, {"rtx3090"})
    unpriced = economics.parse("mining_revenue_per_gpu_day: {default: 0.40}\n", "econ.yml")
    pricing.check_models(unpriced, {"rtx3070"})  # no power price: power is not counted for any card


def test_economics_and_schedule_starters_pass_their_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["economics", "init"]) == 0 and main(["economics", "check"]) == 0
    assert "economics.yml: ok (USD; models: default only; power priced)" in capsys.readouterr().out
    assert main(["schedule", "init"]) == 0 and main(["schedule", "check", "schedule.yml"]) == 0
    assert "policy lease-first" in capsys.readouterr().out
    assert main(["schedule", "init"]) == 2 and "schedule.yml exists; use --force" in capsys.readouterr().err
    (tmp_path / "bad.yml").write_text("gpu_power_watts: {rtx3700: 130}\n")
    assert main(["economics", "check", "bad.yml"]) == 7
    assert "bad.yml:1: rtx3700 is not a GPU model m2p knows" in capsys.readouterr().err


def test_unknown_power_is_no_floor_never_free_power():
    """With a power price, a model the file gives no watts has no floor (check_models says so first, at the
    command; the floor path itself never prices its power at 0)."""
    econ = economics.parse("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\n"
                           "gpu_power_watts: {rtx3090: 300}\n")
    assert econ.power_cost_per_hour("rtx3070") is None and econ.lacking("rtx3070") == "gpu_power_watts"
    (floor,) = pricing.floors([("rtx3070", "8Gi")], econ)
    assert floor.floor_per_hour is None and floor.net_per_hour is None and akash_mappings([floor]) == ""
    # the agent's measured watts stand in for the file's
    (measured,) = pricing.floors([("rtx3070", "8Gi")], economics.parse(
        "mining_revenue_per_mhs_day: {kawpow: 0.02}\npower_price_per_kwh: 0.12\n"), [
        pricing.MeasuredCard("rtx3070", "8Gi", "kawpow", 20.0, 130.0)])
    assert measured.floor_per_hour == pytest.approx(max(0.4 / 24, 0.0156)) and measured.source.startswith("measured")
    unmeasured = pricing.floors([("rtx3070", "8Gi")], economics.parse(
        "mining_revenue_per_mhs_day: {kawpow: 0.02}\npower_price_per_kwh: 0.12\n"), [
        pricing.MeasuredCard("rtx3070", "8Gi", "kawpow", 20.0, None)])
    assert unmeasured[0].floor_per_hour is None  # neither measured nor written: unknown
    # no power price: power is counted for no card, by the owner's choice
    free = economics.parse("mining_revenue_per_gpu_day: {default: 0.48}\n")
    assert free.power_cost_per_hour("rtx3070") == 0.0 and free.floor_per_hour("rtx3070") == pytest.approx(0.02)


def test_default_watts_cover_every_farm_model_and_known_names_pass():
    econ = economics.parse("mining_revenue_per_gpu_day: {default: 0.40, cmp90hx: 1.1}\npower_price_per_kwh: 0.12\n"
                           "gpu_power_watts: {default: 200, rtx3070: 130}\nlease_price_per_gpu_hour: {default: 0.1}\n",
                           "econ.yml")
    assert pricing.check_models(econ, {"rtx3070", "rtx3090", "cmp90hx"}) is econ
    assert set(econ.models()) == {"cmp90hx", "rtx3070"}  # default is no model
    assert {"rtx3070", "cmp90hx", "rx580", "rx6800"} <= pricing.known_models()  # AMD rigs' cards too
    pricing.check_models(economics.parse("gpu_power_watts: {rx580: 120}\n", "econ.yml"))  # no farm needed


@pytest.mark.parametrize(("text", "said"), [
    ("lease_price_per_gpu_hour:\n  default: 0.1\n  rtx3700: 0.2\n", "econ.yml:3: rtx3700 is not a GPU model"),
    ("mining_revenue_per_gpu_day: {cmp90xh: 1.0}\n", "econ.yml:1: cmp90xh is not a GPU model"),
    ("gpu_power_watts: {RTX 3070: 130}\n", "did you mean rtx3070?"),
    ("gpu_power_watts: {defualt: 130}\n", "did you mean default?"),
    ('gpu_power_watts: {"rtx\\e[2J3070": 130}\n', "rtx\\x1b[2J3070 is not a GPU model"),  # no terminal control
])
def test_a_misspelt_model_in_any_per_model_map_is_refused_with_the_name_meant(text, said):
    with pytest.raises(EconomicsError) as caught:
        pricing.check_models(economics.parse(text, "econ.yml"))
    assert said in str(caught.value) and "did you mean" in str(caught.value)
    assert caught.value.exit_code == 7


def test_a_name_m2p_does_not_know_and_nothing_alike_says_where_to_find_the_names():
    with pytest.raises(EconomicsError, match=r"econ.yml:1: qqq is not a GPU model .*`m2p pricing` and "
                                             r"`m2p attributes` name each rig's"):
        pricing.check_models(economics.parse("gpu_power_watts: {qqq: 100}\n", "econ.yml"))


def test_pricing_refuses_a_misspelt_model_and_a_farm_model_without_power_exit_7(tmp_path, capsys, saved_report):
    report = saved_report(("NVIDIA GeForce RTX 3070", "2484", 8192))
    econ = tmp_path / "econ.yml"
    econ.write_text("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\nmargin: 0.15\n"
                    "gpu_power_watts:\n  rtx3700: 130\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ)]) == 7
    err = capsys.readouterr().err
    assert f"{econ}:5: rtx3700 is not a GPU model m2p knows" in err and "did you mean rtx3070?" in err
    econ.write_text("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ)]) == 7
    assert "no figure for rtx3070 (cards this farm has)" in capsys.readouterr().err
    econ.write_text("mining_revenue_per_gpu_day: {default: 0.40}\npower_price_per_kwh: 0.12\nmargin: 0.15\n"
                    "gpu_power_watts:\n  rtx3070: 130\n")
    assert main(["pricing", "--from", str(report), "--economics", str(econ), "--format", "akash"]) == 0
    assert capsys.readouterr().out.strip() == "rtx3070.8Gi=12.28"  # docs/economics.md's worked example


def test_schedule_apply_refuses_a_misspelt_economics_file_before_any_rig(tmp_path, capsys):
    (tmp_path / "rigs.yml").write_text("all:\n  hosts:\n    rig1:\n      ansible_host: 10.0.0.1\n")
    (tmp_path / "s.yml").write_text("timezone: UTC\npolicy: profit\n")
    (tmp_path / "e.yml").write_text("gpu_power_watts: {rtx3700: 130}\n")
    code = main(["schedule", "apply", str(tmp_path / "s.yml"), "--economics", str(tmp_path / "e.yml"),
                 "-i", str(tmp_path / "rigs.yml"), "--yes"])
    assert code == 7 and f"{tmp_path / 'e.yml'}:1: rtx3700 is not a GPU model" in capsys.readouterr().err
