from miner2provider.cli import entry

entry()
