#!/bin/bash
# STAND-IN for SMOS's /root/utils/reloadOc.sh (m2p sandbox rig): the real one applies the clocks the
# owner set on the dashboard; this one sets the power limit the stand-in "dashboard" holds (130 W).
code=0
for i in $(nvidia-smi --query-gpu=index --format=csv,noheader); do nvidia-smi -i "$i" -pl 130 || code=$?; done
exit $code
