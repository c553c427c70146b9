#!/usr/bin/env bash
# Static security checks of the Bicep under infra/ with checkov, from a virtual environment of its own.
#
# checkov pins versions of libraries the app also pins (differently), so it never goes into .venv:
# it lives in .venv-checkov, installed idempotently (a stamp holds the pinned version, so a changed
# pin or a deleted venv reinstalls). Arguments are passed to checkov after ours; with none, it prints
# failed checks only (--quiet --compact). Exit status: checkov's (1 when a check failed).
# Non-interactive: safe with CI=true and no stdin.
#
#   scripts/checkov.sh              # human-readable, failed checks only
#   scripts/checkov.sh -o json      # what tests/infra/test_checkov.py reads
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

CHECKOV_VERSION="3.3.30"
PYTHON="${PYTHON:-python3}"
VENV="$root/.venv-checkov"
stamp="$VENV/.checkov-version"

if [[ ! -x "$VENV/bin/checkov" || "$(cat "$stamp" 2>/dev/null || true)" != "$CHECKOV_VERSION" ]]; then
    echo "checkov.sh: installing checkov==$CHECKOV_VERSION into $VENV" >&2
    if [[ ! -x "$VENV/bin/python" ]]; then
        "$PYTHON" -m venv "$VENV"
    fi
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    # stdout to stderr: with -o json, stdout must hold checkov's report and nothing else.
    "$VENV/bin/python" -m pip install --quiet "checkov==$CHECKOV_VERSION" </dev/null >&2
    printf '%s\n' "$CHECKOV_VERSION" >"$stamp"
fi

if [[ $# -eq 0 ]]; then
    set -- --quiet --compact
fi
# --skip-download: no call to the Prisma Cloud API for guidelines (works offline, and sends nothing anywhere).
exec "$VENV/bin/checkov" --directory infra --framework bicep --skip-download "$@"
