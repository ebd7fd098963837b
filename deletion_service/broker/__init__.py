"""The message broker behind a small interface; ``pulsar_client`` is the only module importing pulsar."""
