#!/usr/bin/env bash
# The project's test command (the README's second command): runs every test of the workspace.
#
# It must pass on a fresh machine with nothing installed by hand, so anything the tests need is
# installed and started from here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo test --workspace "$@"
