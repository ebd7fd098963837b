"""Phase one of PIP-186: requests reach the system topic before metadata forgets the ledgers."""
