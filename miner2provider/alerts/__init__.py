"""Alerts (issue 56): what a dashboard sweep knows (facts.py), the rules judged on it, purely (rules.py), the owner's
alert file (config.py) and the receivers the messages go to (receivers.py, smtp.py), sent off the sweep's thread
(dispatch.py)."""
