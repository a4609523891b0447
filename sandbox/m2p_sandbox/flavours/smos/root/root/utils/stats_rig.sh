#!/bin/bash
# STAND-IN for SMOS's /root/utils/stats_rig.sh (m2p sandbox rig): the rig's hashrate as JSON, in H/s.
if screen -ls miner 2>/dev/null | grep -qE '[0-9]+\.miner\b'; then echo '{"hash": 100000000}'; else echo '{"hash": null}'; fi
