# STAND-IN for a HiveOS miner's h-run.sh (m2p sandbox rig): sourced by miner-run, it runs the miner in the
# foreground (the GPU miner stand-in, through /hive/bin/standin-miner); when it exits, miner-run starts it again.
/hive/bin/standin-miner "$MINER_NAME"
