"""checkov over infra/ (scripts/checkov.sh, its own virtual environment): no failed check, and every skipped
check is skipped inline in the Bicep with a reason.

The first run installs checkov into .venv-checkov (about half a minute); later runs take about 20 s.
Skipped only when that install cannot reach the package index.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from tests.infra.bicep import INFRA, ROOT, bicep_files, text

SCRIPT = ROOT / "scripts" / "checkov.sh"
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
# What pip says when it cannot reach an index (DNS, refused or timed-out connections, no route), or when no
# index it can reach lists checkov at all ("from versions: none"; a reachable PyPI lists dozens).
NO_NETWORK = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|ConnectTimeout|Network is unreachable|No route to host|"
    r"requirement checkov==[\d.]+ \(from versions: none\)",
)
INLINE_SKIP = re.compile(r"//\s*checkov:skip=(CKV2?_[A-Z]+_\d+):(.*)")


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    run = subprocess.run([str(SCRIPT), "-o", "json"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         stdin=subprocess.DEVNULL)
    if not CHECKOV.exists() and NO_NETWORK.search(run.stderr):
        last = [line for line in run.stderr.splitlines() if line.strip()][-1:]
        pytest.skip(f"cannot install checkov into .venv-checkov: no package index reachable ({' '.join(last)})")
    # checkov exits 1 when a check failed; the report says which.
    assert run.returncode in (0, 1), f"scripts/checkov.sh failed ({run.returncode}):\n{run.stderr[-3000:]}"
    parsed = json.loads(run.stdout)
    reports = parsed if isinstance(parsed, list) else [parsed]
    (bicep,) = [r for r in reports if r["check_type"] == "bicep"]
    return bicep


def test_checkov_finds_no_failed_check(report: dict[str, Any]) -> None:
    failed = [f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
              for c in report["results"].get("failed_checks", [])]
    assert failed == [], "\n".join(failed)
    assert report["summary"]["failed"] == 0


def test_checkov_read_every_file(report: dict[str, Any]) -> None:
    # A file checkov cannot parse is reported as a parsing error, not as a failure: it must not hide there.
    assert report["summary"]["parsing_errors"] == 0, report["results"].get("parsing_errors")
    checked = {c["file_path"].lstrip("/") for kind in ("passed_checks", "skipped_checks")
               for c in report["results"].get(kind, [])}
    # Every module that holds a resource checkov has checks for was looked at.
    for relative in ("modules/storage.bicep", "modules/keyvault.bicep", "modules/functionapp.bicep"):
        assert relative in checked, relative
    assert report["summary"]["passed"] >= 20


def test_every_skip_is_inline_with_a_reason(report: dict[str, Any]) -> None:
    skipped = report["results"].get("skipped_checks", [])
    for check in skipped:
        reason = (check.get("check_result", {}).get("suppress_comment") or "").strip()
        assert len(reason.split()) >= 5, f"{check['check_id']} on {check['resource']} is skipped without a reason"
    inline = {(relative, match.group(1)) for relative in bicep_files()
              for match in INLINE_SKIP.finditer(text(relative))}
    for relative, _check in inline:
        assert (INFRA / relative).exists()
    reported = {(c["file_path"].lstrip("/"), c["check_id"]) for c in skipped}
    # Every skip is one of the inline comments (none comes from the command line), and each comment names a
    # check checkov really ran on that file.
    assert reported == inline
