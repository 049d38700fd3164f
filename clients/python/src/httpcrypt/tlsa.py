"""TLSA placeholder replaced below."""
