"""The managed identity token endpoint, served over the world's `TokenIssuer` (`sandbox.world.identity`).

`handle_token_request` serves the issuer the way App Service (and so Azure
Functions) serves its managed identity endpoint, `IDENTITY_ENDPOINT`:
`GET {endpoint}?resource=<audience>&api-version=2019-08-01[&client_id=<id>]` with the
header `X-IDENTITY-HEADER: <IDENTITY_HEADER>`, answered with
`{"access_token", "expires_on" (epoch seconds, a string), "resource", "token_type", "client_id"}`.
That is what msal's `_obtain_token_on_app_service` (behind azure-identity's
`ManagedIdentityCredential`) sends and parses, so the real credential works against it too.
"""

from __future__ import annotations

import uuid

from sandbox.api.wire import Request, Response, json_response
from sandbox.world.identity import API_VERSION, CLIENT_ID, IDENTITY_HEADER, TokenIssuer


def _identity_error(status: int, message: str) -> Response:
    """The shape App Service's identity endpoint answers errors with (msal reads statusCode and message)."""
    return json_response(status, {"statusCode": status, "message": message, "correlationId": str(uuid.uuid4())})


def handle_token_request(issuer: TokenIssuer, request: Request) -> Response:
    """Serve `GET {TOKEN_PATH}?resource=…&api-version=2019-08-01[&client_id=…]` as App Service does."""
    if request.method != "GET":
        return _identity_error(405, "The identity endpoint serves GET only.")
    if request.header("x-identity-header") != IDENTITY_HEADER:
        return _identity_error(401, "The X-IDENTITY-HEADER header is missing or does not match IDENTITY_HEADER.")
    if request.query.get("api-version") != API_VERSION:
        return _identity_error(400, f"api-version must be {API_VERSION}, got {request.query.get('api-version')!r}.")
    resource = (request.query.get("resource") or "").strip()
    if not resource:
        return _identity_error(400, "The resource parameter is required.")
    for unsupported in ("mi_res_id", "object_id", "principal_id"):
        if unsupported in request.query:
            return _identity_error(400, f"The sandbox selects its identity by client_id only, not {unsupported}.")
    client_id = request.query.get("client_id")
    if client_id is not None and client_id.lower() != CLIENT_ID:
        return _identity_error(
            400, "No User Assigned or Delegated Managed Identity found for specified ClientId/ResourceId/PrincipalId."
        )
    issued = issuer.issue(resource)
    return json_response(200, {
        "access_token": issued.token,
        "expires_on": str(int(issued.expires_on)),
        "resource": resource,
        "token_type": "Bearer",
        "client_id": CLIENT_ID,
    })
