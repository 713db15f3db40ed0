"""The detector on a virtual clock: the driver replay and eval share, ``specwatch replay``,
``specwatch eval`` and the real-log corpus."""
