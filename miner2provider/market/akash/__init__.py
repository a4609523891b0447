"""Akash: the GPU card database in Akash's model names, node labels, provider attributes,
gpus.json, and price mappings for Akash's bid script."""
