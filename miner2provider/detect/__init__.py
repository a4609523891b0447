"""Stage 1, detect: SSH fan-out (ssh.py), the probe's facts (facts/: a command and a pure parser each),
readiness, drift of a converted rig (drift.py) and the rig report (report.py).  Changes no rig."""
