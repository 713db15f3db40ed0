"""specwatch host agent: collectors, spool and shipper. Never imports ``app``."""

__version__ = "0.1.0"
