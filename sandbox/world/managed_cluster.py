"""The simulated cluster as an Entra ID-enabled AKS managed cluster, for ARM's `listClusterUserCredential`.

A real AKS cluster with Entra ID integration hands out a user kubeconfig whose cluster
entry has the API server address and CA, and whose user runs the kubelogin exec plugin
to get an Entra token for the AKS server application. The autoscaler reads only the
cluster entry and brings its own token; the exec user is there so a client that ran it
would be caught out, as it would be in Azure.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml

from sandbox.world.identity import AKS_AUDIENCE, TENANT_ID


@dataclass(frozen=True, slots=True)
class ManagedCluster:
    subscription_id: str
    resource_group: str
    name: str
    server: str  # the Kubernetes API double's URL
    ca_pem: bytes  # the CA the server's certificate chains to

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.ContainerService/managedClusters/{self.name}"
        )

    def matches(self, resource_group: str, name: str) -> bool:
        return resource_group.lower() == self.resource_group.lower() and name.lower() == self.name.lower()

    def user_kubeconfig(self) -> dict[str, Any]:
        """The kubeconfig `az aks get-credentials` would write for this cluster (exec format)."""
        user = f"clusterUser_{self.resource_group}_{self.name}"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": self.name,
                "cluster": {
                    "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    "server": self.server,
                },
            }],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
            "preferences": {},
            "users": [{
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "kubelogin",
                        "args": ["get-token", "--environment", "AzurePublicCloud", "--server-id", AKS_AUDIENCE,
                                 "--client-id", "80faf920-1908-4b52-b5ef-a8e7bedfc67a", "--tenant-id", TENANT_ID,
                                 "--login", "devicecode"],
                        "env": None,
                        "installHint": "\nkubelogin is not installed which is required to connect to AAD enabled cluster.\n",
                        "provideClusterInfo": False,
                    },
                },
            }],
        }

    def credential_results(self) -> dict[str, Any]:
        """The body of `listClusterUserCredential`: the kubeconfig as YAML, base64-encoded."""
        text = yaml.safe_dump(self.user_kubeconfig(), sort_keys=False)
        return {"kubeconfigs": [{"name": "clusterUser", "value": base64.b64encode(text.encode()).decode()}]}
