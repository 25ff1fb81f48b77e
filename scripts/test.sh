#!/usr/bin/env bash
# The project's test command (the README's second command): starts a local LocalStack (installed
# on first use, no Docker), runs every test of the workspace against both the in-process account
# and LocalStack, and stops LocalStack again.
#
# It must pass on a fresh machine with nothing installed by hand, so everything the tests need is
# installed and started from here. Extra arguments go to `cargo test`.
#
#   RUST_STREAM_SKIP_LIVE=1  run without LocalStack (live tests then say they were skipped;
#                            under CI=true they fail instead)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${RUST_STREAM_SKIP_LIVE:-0}" != "1" ]]; then
  started_here=0
  if ! scripts/localstack.sh status >/dev/null 2>&1; then
    started_here=1
  fi
  endpoint="$(scripts/localstack.sh start)"
  if [[ "$started_here" == "1" ]]; then
    trap 'scripts/localstack.sh stop >/dev/null 2>&1 || true' EXIT
  fi
  export RUST_STREAM_LIVE_ENDPOINT="$endpoint"
  echo "LocalStack at $endpoint" >&2
fi

cargo test --workspace "$@"
