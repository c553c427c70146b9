"""Reading an optional custom resource each poll (CapacityBuffers, ProvisioningRequests) the same way.

A read that fails is logged and the poll plans without those objects; a cluster that does not serve the CRD has the
feature off, said once per process (and again after the CRD came and went).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from shared.ports import ClusterError

log = logging.getLogger(__name__)

T = TypeVar("T")


class OptionalCrd:
    """One optional CRD: `read(list_)` is its objects, or None when they cannot be had this poll."""

    def __init__(self, resource: str, feature: str) -> None:
        self._resource = resource  # e.g. capacitybuffers.autoscaling.x-k8s.io
        self._feature = feature  # e.g. capacity buffers
        self._absent_said = False

    def read(self, list_: Callable[[], list[T] | None]) -> list[T] | None:
        try:
            listed = list_()
        except ClusterError as exc:
            log.warning("%s not read (%s); planning without them this poll", self._feature, exc)
            return None
        if listed is None:
            if not self._absent_said:
                log.info("%s is not served: %s are off", self._resource, self._feature)
                self._absent_said = True
            return None
        self._absent_said = False
        return listed
