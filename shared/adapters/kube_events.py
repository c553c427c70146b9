"""Writes Kubernetes Events (core/v1) for what the autoscaler decided about a pod or node.

Adapter module: does I/O through the official client. Events are best effort, as in
cluster-autoscaler: a failure to write one is logged and never fails a poll.
"""

from __future__ import annotations

import logging

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from shared.ports import ClusterEvent

log = logging.getLogger(__name__)

COMPONENT = "vmss-autoscaler"
# involvedObject.apiVersion of the kinds we write Events about that are not core/v1: kubectl describe and event
# watchers match on it.
API_VERSIONS = {"CapacityBuffer": "autoscaling.x-k8s.io/v1beta1", "ProvisioningRequest": "autoscaling.x-k8s.io/v1"}


class KubernetesEventSink:
    def __init__(self, api_client: ApiClient, *, request_timeout: tuple[float, float] = (5.0, 30.0)) -> None:
        self._core = CoreV1Api(api_client)
        self._timeout = request_timeout

    def emit(self, event: ClusterEvent) -> None:
        stamp = event.at.isoformat().replace("+00:00", "Z")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{event.name}.", "namespace": event.namespace},
            "involvedObject": {"apiVersion": API_VERSIONS.get(event.kind, "v1"), "kind": event.kind, "namespace": event.namespace,
                               "name": event.name, "uid": event.uid},
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(event.namespace, body, _request_timeout=self._timeout)
        except (ApiException, HTTPError) as exc:
            log.warning("could not record event %s on %s/%s: %s", event.reason, event.namespace, event.name, exc)
