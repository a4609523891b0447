"""miner2provider: turn GPU mining rigs into Kubernetes GPU providers."""

__version__ = "0.1.0"
