# STAND-IN excerpt of msOS core/.bashrc: the miner-control aliases (the real mstart also stops msOS's node
# client and runs validate.sh first, and runs its console screen as the user minerstat).
alias mstart='screen -S minerstat-console -X quit > /dev/null 2>&1; cd /home/minerstat/minerstat-os/; sudo rm /tmp/stop.pid > /dev/null 2>&1; sudo rm /dev/shm/maintenance.pid > /dev/null 2>&1; screen -A -m -d -S minerstat-console sudo bash start.sh'
alias mstop='sudo /home/minerstat/minerstat-os/core/stop'
alias mclock='cd /home/minerstat/minerstat-os/bin; sudo bash overclock.sh'
