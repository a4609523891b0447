#!/bin/bash
# STAND-IN for msOS's start.sh (m2p sandbox rig), which the mstart alias runs in the screen session
# "minerstat-console" (minerstat-os core/.bashrc).  The real one is msOS's node client: it validates and
# fetches the rig's config, then starts the miner in the screen "minew" and restarts it when it ends,
# unless mining was stopped (core/stop writes /tmp/stop.pid) or the rig is in maintenance
# (/dev/shm/maintenance.pid).  This one does the last part only, every 5 s, and talks to no dashboard.
cd /home/minerstat/minerstat-os || exit 1
while true; do
	if [[ ! -e /tmp/stop.pid && ! -e /dev/shm/maintenance.pid ]] && ! screen -ls minew 2> /dev/null | grep -q '\.minew\b'; then
		screen -dmS minew /home/minerstat/minerstat-os/core/standin-miner
	fi
	sleep 5
done
