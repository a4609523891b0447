"""Register: what a rig's GPUs are called on the market and in Kubernetes labels."""
