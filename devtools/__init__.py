"""Development-only tools: the local functions runner, the demo, Azurite control. Never deployed."""
