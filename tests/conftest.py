"""Fixtures shared by the whole suite live in tests/fixtures/ and are registered here."""

pytest_plugins = [
    "tests.fixtures.azurite",
    "tests.fixtures.sandbox",
]
