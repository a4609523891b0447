#!/bin/bash
# STAND-IN for msOS's bin/overclock.sh (m2p sandbox rig), which its mclock alias runs from this folder
# (minerstat-os core/.bashrc).  The real one fetches the rig's clocks from minerstat's API (the access key in
# /media/storage/config.js), applies them through nvidia-smi and nvidia-settings (restarting Xorg when its
# display screens are missing), and exits with its last command's status.  This one sets the power limit
# the stand-in "dashboard" holds (170 W) and talks to no API.
code=0
for i in $(nvidia-smi --query-gpu=index --format=csv,noheader); do nvidia-smi -i "$i" -pl 170 > /dev/null || code=$?; done
exit $code
