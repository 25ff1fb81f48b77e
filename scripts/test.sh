#!/usr/bin/env bash
# The project's test command (the README's second command): starts a local LocalStack (installed
# on first use, no Docker), runs every test of the workspace against both the in-process account
# and LocalStack, and stops LocalStack again.
#
# It must pass on a fresh machine with nothing installed by hand, so everything the tests need is
# installed and started from here (the AsyncAPI test installs its parser, Node's @asyncapi/parser,
# itself with scripts/asyncapi-parser.sh). Extra arguments go to `cargo test`.
#
#   LOCALSTACK_PORT=4566     reuse (or start) the LocalStack on this port instead of a fresh one
#                            on a free port
#   RUST_STREAM_SKIP_LIVE=1  run without LocalStack (live tests then say they were skipped;
#                            under CI=true they fail instead)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${RUST_STREAM_SKIP_LIVE:-0}" != "1" ]]; then
  # Each run starts its own LocalStack on a free port (or on LOCALSTACK_PORT), so two runs on one
  # machine never share queues: the examples use fixed names such as `orders.fifo`.
  if [[ -z "${LOCALSTACK_PORT:-}" ]]; then
    LOCALSTACK_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  fi
  export LOCALSTACK_PORT
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
