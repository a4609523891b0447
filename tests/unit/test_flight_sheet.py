"""A HiveOS flight sheet that keeps the miner from being started on some cards only hands the whole rig over
(agent/flight_sheet.py), said by file, variable and flag: never a wallet, a pool or a password."""

from __future__ import annotations

import pytest

from miner2provider.agent import flight_sheet

RIG = 'RIG_ID=10101\nRIG_PASSWD="1q2w3e4r"\nMINER=t-rex\nMINER2=\nWD_ENABLED=1\n'
WALLET = ('TREX_TEMPLATE="RVN:0xWALLETSECRET.%WORKER_NAME%"\nTREX_URL="stratum+tcp://pool.example:3333"\n'
          'TREX_PASS="poolpassword"\nTREX_ALGO="kawpow"\n')


@pytest.mark.parametrize(("rig", "user_config", "said"), [
    (RIG, "", ""),
    (RIG, 'TREX_USER_CONFIG="--lhr-tune 71 --mt 3"', ""),  # the same on every card: per card works
    (RIG, 'TREX_USER_CONFIG="-d 0,1"', "wallet.conf TREX_USER_CONFIG selects devices by index"),
    (RIG, "LOLMINER_USER_CONFIG='--devices 1'", "wallet.conf LOLMINER_USER_CONFIG selects devices by index"),
    (RIG, 'TREX_USER_CONFIG=\'"devices": "0,2",\n"intensity": "22"\'',
     "wallet.conf TREX_USER_CONFIG selects devices by index"),  # T-Rex's JSON lines, over two lines
    (RIG, 'GMINER_USER_CONFIG="--cuda_devices 0 1"', "wallet.conf GMINER_USER_CONFIG selects devices by index"),
    (RIG, 'TREX_USER_CONFIG="--intensity 22,21 --pl 200"', "wallet.conf TREX_USER_CONFIG sets per-GPU lists"),
    (RIG, 'TREX_USER_CONFIG="--watchdog-exit-mode 3:10:r"', "wallet.conf TREX_USER_CONFIG reboots the rig on a failure"),
    (RIG, "CUSTOM_USER_CONFIG='--watchdog script'", "wallet.conf CUSTOM_USER_CONFIG reboots the rig on a failure"),
    (RIG.replace("MINER2=", "MINER2=lolminer"), "", "rig.conf runs several miners (MINER2)"),
])
def test_what_hands_the_whole_rig_over_is_said_without_a_secret(tmp_path, rig, user_config, said):
    (tmp_path / "rig.conf").write_text(rig)
    (tmp_path / "wallet.conf").write_text(WALLET + user_config + "\n")
    why = flight_sheet.why_whole((str(tmp_path / "rig.conf"), str(tmp_path / "wallet.conf")))
    assert why == said
    for secret in ("WALLETSECRET", "poolpassword", "pool.example", "1q2w3e4r"):
        assert secret not in why


def test_files_that_cannot_be_read_say_nothing(tmp_path):
    assert flight_sheet.why_whole((str(tmp_path / "absent.conf"),)) == ""
