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
# A shell started in the background ignores SIGINT, and so does everything it starts: Ctrl-C (a
# SIGINT to the process group) would stop nothing. Such a run starts again with SIGINT at its
# default, so that the trap below sees it.
if [[ -z "${RUST_STREAM_TEST_SH_SIGNALS:-}" ]] && env --default-signal=INT true 2>/dev/null; then
  RUST_STREAM_TEST_SH_SIGNALS=1 exec env --default-signal=INT "${BASH_SOURCE[0]}" "$@"
fi
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

# cargo runs in a session of its own, so that Ctrl-C (SIGINT to the terminal's foreground process
# group, or to this script alone) reaches this script, which then stops the whole run: cargo, the
# test binary it runs and what that started (a background command ignores SIGINT, so they get
# SIGTERM). The EXIT trap then stops this run's LocalStack.
setsid cargo test --workspace "$@" &
tests=$!
trap 'kill -TERM -- "-$tests" 2>/dev/null || true; wait "$tests" || true; exit 130' INT TERM
wait "$tests"
