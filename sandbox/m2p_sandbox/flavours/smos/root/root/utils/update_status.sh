#!/bin/bash
# STAND-IN for one pass of SMOS's /root/utils/update_status.sh (m2p sandbox rig), which the real OS runs
# as the user miner every report interval.  No dashboard here: its command comes from /tmp/EXECUTE (the
# real script's own test hook).  What it does with "start" and with /tmp/minerPause is what the real
# script does: "start" runs start.sh; the pause kills the miner's screen and keeps it down, and once
# the pause is gone the miner is started again.
[[ -e /tmp/EXECUTE ]] && EXECUTE=$(cat /tmp/EXECUTE) && rm -f /tmp/EXECUTE
[[ $EXECUTE == start ]] && /root/start.sh
if [[ -f /tmp/minerPause ]]; then
	touch /var/tmp/minerPause
	for s in $(screen -ls miner 2>/dev/null | grep -oE '[0-9]+\.miner\b'); do screen -S "$s" -X quit; done
	screen -wipe > /dev/null 2>&1
elif [[ -f /var/tmp/minerPause ]]; then
	rm -f /var/tmp/minerPause
	/root/start.sh
fi
exit 0
