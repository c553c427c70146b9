"""The sandbox's top layer: the HTTP API doubles over the simulated world, and the server that serves them.

Each double is a function of (world, request) -> response (`wire` holds those values, no sockets), so it is
tested without a server: `kube_api` (Kubernetes), `arm_api` with `agent_pools_api`, `spot_api`,
`flexible` and `arm_paging` (Azure Resource Manager), `loganalytics_api`, `keyvault_api`, `prices_api`
(Retail Prices), `token_endpoint` (the managed identity endpoint), and `storage_backlog` (a render
queue's backlog mirrored in a real Storage queue). `server` moves the bytes over HTTPS and drives the
clock. This layer imports the world (`sandbox.world`) and the scenario model (`sandbox.model`); nothing
below imports it.
"""
