"""Stages 2-3, plan and run: which rigs a playbook must touch and why (pipeline.py: screen -> guard ->
fingerprint -> batch -> outcome; guards.py, fingerprint.py), the role variables m2p derives
(role_vars.py), the Ansible run (runner.py), removal, drain, air-gap bundles and the agent zipapp."""
