"""What a kubeconfig from Key Vault may ask of the function host, checked before the kubernetes client reads it.

Adapter module, pure: it reads a parsed document and raises ClusterError; it never touches a file or the network.

Whoever can write the secret must not gain, through the kubernetes client, code execution in the app (`exec`,
`auth-provider`), the contents of a host file (`tokenFile`, `certificate-authority`, `client-certificate`,
`client-key`: `tokenFile`'s is sent to the server as a bearer token), the bearer token in clear (an `http://`
server) or an API server whose certificate is not checked (`insecure-skip-tls-verify`), unless the operator
allowed that risk with the setting named for it. Every entry of the document is checked, not only the current
context's.

The client reads `insecure-skip-tls-verify` by Python truthiness (`verify_ssl = not value`), so `"false"`,
`"yes"`, `1` or `[1]` would turn verification off while a check comparing with `True` passed it: a boolean must
be a real YAML boolean here, so what is checked is what the client does. A document of the wrong shape (`users`
not a list of mappings) is refused naming the field, rather than failing inside the client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.ports import ClusterError
from shared.settings import Settings

__all__ = ["KubeconfigTrust", "check_kubeconfig"]

# The fields the kubernetes client turns into a path it opens (FileOrData without the `-data` form).
_HOST_FILES: Final = {"cluster": ("certificate-authority",), "user": ("tokenFile", "client-certificate", "client-key")}
# Fields the client reads as text; anything else there (a list, a mapping) is a malformed document.
_TEXT: Final = {
    "cluster": ("server", "certificate-authority", "certificate-authority-data", "tls-server-name", "proxy-url"),
    "user": ("token", "tokenFile", "client-certificate", "client-certificate-data", "client-key", "client-key-data",
             "username", "password"),
    "context": ("cluster", "user", "namespace"),
}
_BOOLEANS: Final = {"cluster": ("insecure-skip-tls-verify", "disable-compression")}
_COMMANDS: Final = ("exec", "auth-provider")  # `exec` runs its command; an auth-provider may run a `cmd-path`
_SERVER: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://[^\s/]+(?:/\S*)?")
_SECTIONS: Final = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeconfigTrust:
    """The risks the operator allowed a kubeconfig to take, one setting each; all off by default."""

    commands: bool = False  # KUBECONFIG_ALLOW_EXEC: `exec` and `auth-provider` users
    insecure_tls: bool = False  # KUBECONFIG_ALLOW_INSECURE_TLS: `insecure-skip-tls-verify: true`
    host_files: bool = False  # KUBECONFIG_ALLOW_HOST_FILES: paths instead of inline `-data`, `tokenFile`
    http: bool = False  # KUBECONFIG_ALLOW_HTTP: an `http://` server

    @classmethod
    def from_settings(cls, settings: Settings) -> KubeconfigTrust:
        return cls(commands=settings.kubeconfig_allow_exec, insecure_tls=settings.kubeconfig_allow_insecure_tls,
                   host_files=settings.kubeconfig_allow_host_files, http=settings.kubeconfig_allow_http)


def check_kubeconfig(config: Mapping[str, Any], source: str, *, trust: KubeconfigTrust) -> None:
    """Raise ClusterError naming every malformed field and every risk `trust` does not allow; None when neither."""
    malformed: list[str] = []
    risks: list[str] = []
    current = config.get("current-context")
    if current is not None and not isinstance(current, str):
        malformed.append(f"current-context: must be a context name, got {_kind(current)}")
    for section, inner in _SECTIONS:
        for where, body in _entries(config, section, inner, malformed):
            malformed += _shape(where, inner, body)
            if inner == "cluster":
                risks += _cluster_risks(where, body, trust)
            elif inner == "user":
                risks += _user_risks(where, body, trust)
    if malformed:
        raise ClusterError(f"{source} is not a valid kubeconfig: " + "; ".join(malformed))
    if risks:
        raise ClusterError(f"{source} is refused: " + "; ".join(risks))


def _entries(config: Mapping[str, Any], section: str, inner: str, malformed: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(`<section>[<i>] '<name>'`, the entry's `inner` mapping) of each well-formed entry; the others go to `malformed`."""
    raw = config.get(section)
    if raw is None:
        return []
    if not isinstance(raw, list):
        malformed.append(f"{section}: must be a list of entries with a name and a {inner}, got {_kind(raw)}")
        return []
    found = []
    for index, item in enumerate(raw):
        where = f"{section}[{index}]"
        if not isinstance(item, dict):
            malformed.append(f"{where}: must be a mapping with a name and a {inner}, got {_kind(item)}")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name:
            malformed.append(f"{where}.name: must be a non-empty string, got {_kind(name)}")
            continue
        body = item.get(inner)
        if not isinstance(body, dict):
            malformed.append(f"{where}.{inner} ({name!r}): must be a mapping, got {_kind(body)}")
            continue
        found.append((f"{where}.{inner} ({name!r})", body))
    return found


def _shape(where: str, inner: str, body: Mapping[str, Any]) -> list[str]:
    problems = [f"{where}.{key}: must be a string, got {_kind(body[key])}"
                for key in _TEXT.get(inner, ()) if key in body and not isinstance(body[key], str)]
    problems += [f"{where}.{key}: must be true or false (a YAML boolean), got {_kind(body[key])}"
                 for key in _BOOLEANS.get(inner, ()) if key in body and not isinstance(body[key], bool)]
    if inner == "cluster" and not isinstance(body.get("server"), str):
        problems.append(f"{where}.server: missing")
    if inner == "context" and not isinstance(body.get("cluster"), str):
        problems.append(f"{where}.cluster: missing")
    for key in _COMMANDS:
        if inner == "user" and key in body and not isinstance(body[key], dict):
            problems.append(f"{where}.{key}: must be a mapping, got {_kind(body[key])}")
    return problems


def _cluster_risks(where: str, body: Mapping[str, Any], trust: KubeconfigTrust) -> list[str]:
    risks = []
    server = body.get("server")
    if isinstance(server, str):
        match = _SERVER.fullmatch(server)
        # The client loads the CA only for a server starting with "https", so the scheme is compared as written.
        allowed = ("https", "http") if trust.http else ("https",)
        if match is None or match["scheme"] not in allowed:
            risks.append(f"{where}.server {server[:200]!r} is not an https:// URL, so the bearer token would travel "
                         "in clear" + (" (set KUBECONFIG_ALLOW_HTTP=true to allow http://)" if not trust.http else ""))
    if body.get("insecure-skip-tls-verify") is True and not trust.insecure_tls:
        risks.append(f"{where} has insecure-skip-tls-verify: true, so the API server's certificate is not checked "
                     "(set KUBECONFIG_ALLOW_INSECURE_TLS=true to allow it)")
    return risks + _file_risks(where, body, _HOST_FILES["cluster"], trust)


def _user_risks(where: str, body: Mapping[str, Any], trust: KubeconfigTrust) -> list[str]:
    risks = []
    if not trust.commands:
        risks += [f"{where} has {key!r}, which runs a command on the function host "
                  "(set KUBECONFIG_ALLOW_EXEC=true to allow it)" for key in _COMMANDS if key in body]
    return risks + _file_risks(where, body, _HOST_FILES["user"], trust)


def _file_risks(where: str, body: Mapping[str, Any], keys: tuple[str, ...], trust: KubeconfigTrust) -> list[str]:
    if trust.host_files:
        return []
    return [f"{where}.{key} reads a file on the function host (give the -data form inline, or set "
            "KUBECONFIG_ALLOW_HOST_FILES=true to allow it)" if key != "tokenFile" else
            f"{where}.tokenFile reads a file on the function host and sends it as the bearer token (give `token` "
            "inline, or set KUBECONFIG_ALLOW_HOST_FILES=true to allow it)"
            for key in keys if key in body]


def _kind(value: Any) -> str:
    """What a value is, for an error: its type, and the value itself when short (never a whole token)."""
    if value is None:
        return "nothing"
    shown = repr(value)
    return f"{type(value).__name__} {shown}" if len(shown) <= 12 else type(value).__name__
