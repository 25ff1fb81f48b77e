#!/usr/bin/env bash
# The project's test command (the README's second command): starts a local LocalStack (installed
# on first use, no Docker) and a local PostgreSQL (this machine's server, installed if missing, no
# Docker), runs every test of the workspace against the in-process account and LocalStack, and
# the stores' tests against PostgreSQL, and stops both again.
#
# It must pass on a fresh machine with nothing installed by hand, so everything the tests need is
# installed and started from here (the AsyncAPI test installs its parser, Node's @asyncapi/parser,
# itself with scripts/asyncapi-parser.sh; the large payloads' interop test installs AWS's Python
# extended client with scripts/extended-client.sh). Extra arguments go to `cargo test`.
#
#   LOCALSTACK_PORT=4566     reuse (or start) the LocalStack on this port instead of a fresh one
#                            on a free port
#   POSTGRES_PORT=5432       likewise for PostgreSQL (scripts/postgres.sh)
#   RUST_STREAM_SKIP_LIVE=1  run without LocalStack and PostgreSQL (live tests then say they were
#                            skipped; under CI=true they fail instead)
set -euo pipefail
# A shell started in the background ignores SIGINT, and so does everything it starts: Ctrl-C (a
# SIGINT to the process group) would stop nothing. Such a run starts again with SIGINT at its
# default, so that the trap below sees it.
if [[ -z "${RUST_STREAM_TEST_SH_SIGNALS:-}" ]] && env --default-signal=INT true 2>/dev/null; then
  RUST_STREAM_TEST_SH_SIGNALS=1 exec env --default-signal=INT "${BASH_SOURCE[0]}" "$@"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ "${RUST_STREAM_SKIP_LIVE:-0}" != "1" ]]; then
  # Whatever ends this script from here on (a failed start, the tests' end, Ctrl-C: the INT trap
  # exits, which runs this) stops the servers it started, and only those: a server found running
  # on a given port was someone else's. Each stop is idempotent, so a start that failed halfway is
  # stopped too.
  localstack_started_here=0
  postgres_started_here=0
  stop_servers() {
    if [[ "$localstack_started_here" == "1" ]]; then
      scripts/localstack.sh stop >/dev/null 2>&1 || true
    fi
    if [[ "$postgres_started_here" == "1" ]]; then
      scripts/postgres.sh stop >/dev/null 2>&1 || true
    fi
  }
  trap stop_servers EXIT
  trap 'exit 130' INT TERM

  # Each run starts its own servers on free ports (or on the ports named), so two runs on one
  # machine never share queues or tables: the examples use fixed names such as `orders.fifo`.
  free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  }
  LOCALSTACK_PORT="${LOCALSTACK_PORT:-$(free_port)}"
  if [[ -z "${POSTGRES_PORT:-}" ]]; then
    # LocalStack's port is not taken yet, so the kernel may hand it out again.
    POSTGRES_PORT="$(free_port)"
    while [[ "$POSTGRES_PORT" == "$LOCALSTACK_PORT" ]]; do
      POSTGRES_PORT="$(free_port)"
    done
  fi
  export LOCALSTACK_PORT POSTGRES_PORT

  # PostgreSQL first: it is up in a second or two, so a machine that cannot run it fails before
  # LocalStack's longer start.
  if ! scripts/postgres.sh status >/dev/null 2>&1; then
    postgres_started_here=1
  fi
  postgres_url="$(scripts/postgres.sh start)"
  export RUST_STREAM_POSTGRES_URL="$postgres_url"
  echo "PostgreSQL at $postgres_url" >&2

  if ! scripts/localstack.sh status >/dev/null 2>&1; then
    localstack_started_here=1
  fi
  endpoint="$(scripts/localstack.sh start)"
  export RUST_STREAM_LIVE_ENDPOINT="$endpoint"
  echo "LocalStack at $endpoint" >&2
fi

# cargo runs in a session of its own, so that Ctrl-C (SIGINT to the terminal's foreground process
# group, or to this script alone) reaches this script, which then stops the whole run: cargo, the
# test binary it runs and what that started (a background command ignores SIGINT, so they get
# SIGTERM). The EXIT trap then stops this run's LocalStack and PostgreSQL.
setsid cargo test --workspace "$@" &
tests=$!
trap 'kill -TERM -- "-$tests" 2>/dev/null || true; wait "$tests" || true; exit 130' INT TERM
wait "$tests"
