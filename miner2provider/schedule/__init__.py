"""The time-share schedule: model and validation (model.py), and what it says when (policy.py).

Shared by the CLI (`m2p schedule check|show|apply`) and the on-rig agent.
"""
