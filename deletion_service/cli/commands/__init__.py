"""One module per command or command group; each has ``register(app)``, which ``cli.main`` calls."""
