"""What a training log says went wrong: the signature catalogue (signatures.toml, data), the scanner
that finds its lines, the root-cause classifier, and whole-log classification with a choice of scan
engine. Pure except offline.py's reading of the stream it is handed and the Hyperscan engine's cache.

Shared by the detector (the service) and `relaunch classify` (the client, offline) so that the two
always agree on what a log means (docs/architecture.md, "Detection"). Importing this package costs
nothing: each command imports only the modules it needs.
"""
