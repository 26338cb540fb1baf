"""idp-proxy: aggregate SQL answered under individual differential privacy."""

__version__ = "0.1.0"
