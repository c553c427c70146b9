"""One contract suite per port (shared.ports), run against every implementation so the in-memory ones cannot drift.

Each port has one parametrized fixture (tests/contract/conftest.py) yielding, over the same starting
world, the real adapter (over the sandbox's HTTPS doubles or Azurite) and its in-memory counterpart
(the replay's World ports, MemoryStateStore, MemoryQueue). A test asserts the port's documented
behaviour once; where an in-memory implementation knowingly differs, the test says so with a strict
xfail on that implementation only (`diverges`), so fixing the fake turns the suite red until the mark goes.
"""
