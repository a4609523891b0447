"""The on-rig time-share agent (runs on each rig; see service.py)."""
