"""The Kubernetes version the simulated cluster runs.

Kubelets report it on their nodes (`sandbox.world.kobjects`), the API server's `/version` answers it and
AKS names it as its agent pools' orchestrator version (`sandbox.model.agent_pools`). It lives in the model,
below both, so the model never imports the world to learn it.
"""

from __future__ import annotations

from typing import Final

KUBELET_VERSION: Final = "v1.31.2"
