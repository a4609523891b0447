"""``python -m miner2provider``: the same ``m2p`` command line as the console script."""

from miner2provider.cli import entry

entry()
