#!/usr/bin/env bash
# Installs LiteLLM's proxy (PyPI `litellm[proxy]`, pinned) into a virtual
# environment under ~/.cache, for the router test (server/tests/litellm_router.rs)
# and the two-replica setup of docs/server.md. Prints the `litellm` command.
# Usage: server/scripts/litellm-venv.sh [DIR]   (default: ~/.cache/litellm-venv)
set -euo pipefail
dir=${1:-$HOME/.cache/litellm-venv}
if [ ! -x "$dir/bin/litellm" ]; then
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check 'litellm[proxy]==1.80.0'
fi
echo "$dir/bin/litellm"
