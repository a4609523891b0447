# STAND-IN excerpt of msOS core/.bashrc: the miner-control aliases.
alias mstop='sudo /home/minerstat/minerstat-os/core/stop'
alias mstart='sudo /home/minerstat/minerstat-os/core/start'
