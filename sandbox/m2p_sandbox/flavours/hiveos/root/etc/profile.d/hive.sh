# STAND-IN: puts HiveOS's command folders on login shells' PATH, as on a HiveOS rig.
export PATH="/hive/bin:/hive/sbin:$PATH"
