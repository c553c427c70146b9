"""Services: one function per trigger, orchestrating observe -> decide -> act through the ports.

Services may import shared.engine, shared.domain, shared.actions and shared.ports,
never an adapter or an SDK: the composition root (shared.context) hands them ports.
"""
