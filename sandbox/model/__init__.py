"""The sandbox's bottom layer: the scenario model and the pure values and rules it is written in.

`scenario` loads a scenario file into frozen dataclasses, delegating sections to `spot_spec`, `nic_spec`,
`agent_pools` and `aci` (virtual nodes), with `spec_fields` checking fields and `dists` drawing random
quantities. What those specs are made of is here too, as pure functions shared by the world and the API
doubles: `units` (quantities, durations, times), `resources` (amounts as kube-scheduler counts them),
`podspec` and `selectors` (what a pod asks of a node), `spot` and `quota` (Azure's words for them),
and `kubernetes_version`. Nothing here holds state or imports the world (`sandbox.world`) or the doubles
(`sandbox.api`).
"""
