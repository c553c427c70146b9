#!/usr/bin/env bash
# Install the project's development dependencies, idempotently.
#
# - creates .venv with python3 when it is missing;
# - pip installs requirements-dev.txt (which includes requirements.txt) when
#   either file changed since the last successful install;
# - npm ci (Azurite, the Azure Storage emulator) into ./node_modules when
#   package.json or package-lock.json changed since the last successful install.
#
# Stamp files under .venv/ and node_modules/ hold a hash of the inputs, so a
# deleted .venv or node_modules also triggers a fresh install.
# Non-interactive: safe with CI=true and no stdin. Usage: scripts/bootstrap.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

PYTHON="${PYTHON:-python3}"
VENV="$root/.venv"

hash_files() {
    # sha256 over the named files' contents, in order; a missing file hashes as empty.
    local f
    for f in "$@"; do
        printf '%s\n' "$f"
        cat "$f" 2>/dev/null || true
    done | sha256sum | cut -d' ' -f1
}

# --- Python -------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "bootstrap: creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi

py_stamp="$VENV/.requirements.sha256"
py_hash="$(hash_files requirements.txt requirements-dev.txt)"
if [[ "$(cat "$py_stamp" 2>/dev/null || true)" != "$py_hash" ]]; then
    echo "bootstrap: installing Python requirements"
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    "$VENV/bin/python" -m pip install --quiet -r requirements-dev.txt </dev/null
    printf '%s\n' "$py_hash" >"$py_stamp"
else
    echo "bootstrap: Python requirements up to date"
fi

# --- Node (Azurite) -----------------------------------------------------------
if ! command -v npm >/dev/null 2>&1; then
    echo "bootstrap: npm not found; install Node.js 20 (e.g. apt-get install nodejs npm) and re-run" >&2
    exit 1
fi

node_stamp="$root/node_modules/.package-lock.sha256"
node_hash="$(hash_files package.json package-lock.json)"
if [[ ! -x "$root/node_modules/.bin/azurite" || "$(cat "$node_stamp" 2>/dev/null || true)" != "$node_hash" ]]; then
    echo "bootstrap: installing Node packages (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error </dev/null
    printf '%s\n' "$node_hash" >"$node_stamp"
else
    echo "bootstrap: Node packages up to date"
fi
