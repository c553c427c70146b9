"""The decision engine: snapshots in, plans out.

Pure package: no SDK imports, no I/O, no clock reads (`now` is passed in).
An import-linter contract in tests/test_architecture.py enforces this.
"""
