"""What runs on a rig and is read on the controller too: the agent's status and ledger formats, the rig's
own paths and how files there are written, and the small Kubernetes client the agent and the farm's
reclaimer share.  Python 3.8, like everything the rigs run; nothing here imports the agent or the controller."""
