"""Pure shaping of ledger rows and bus messages for the API: no I/O, no framework imports."""
