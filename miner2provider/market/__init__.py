"""Stage 4, register: what a marketplace sees of the rigs (labels, provider attributes, prices).
Akash is the first (market/akash/)."""
