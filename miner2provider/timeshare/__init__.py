"""Stage 5, schedule: the time-share's schedule (model.py), what it says when (policy.py, profit.py),
the economics file, and what ``m2p schedule apply`` gives each rig (apply.py).

All but apply.py is shared with the on-rig agent and runs on the rig's own python3 (3.8+)."""
