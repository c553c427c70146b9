"""Errors the world raises, carrying what each API double needs to answer.

The world is HTTP-free, but its refusals map one-to-one onto API errors, so
they carry the status code, the Kubernetes Status reason or the ARM error code.
"""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """Becomes a metav1.Status body: reason NotFound, Conflict, AlreadyExists, Invalid, TooManyRequests..."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details


class ArmError(Exception):
    """Becomes {"error": {"code", "message"[, "target"]}} with the HTTP status."""

    def __init__(self, status: int, code: str, message: str, target: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.target:
            error["target"] = self.target
        return {"error": error}


def not_found(resource: str, name: str) -> KubeError:
    return KubeError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def conflict(resource: str, name: str) -> KubeError:
    return KubeError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "kind": resource},
    )
