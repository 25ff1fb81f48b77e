#!/usr/bin/env bash
# Runs a real LocalStack (SQS and SNS) on this machine WITHOUT Docker, for this repository's tests:
# the steps (and the pinned LocalStack version) are those of the testing kit's script,
# `rust-stream/src/testing/localstack.sh`, which `rust_stream::testing::LocalStack` runs for a
# downstream crate; this wrapper only says where things go in a checkout.
#
#   scripts/localstack.sh install   create/refresh the cached virtualenv
#   scripts/localstack.sh start     install if needed, start, wait until SQS and SNS are up,
#                                   print the endpoint URL on stdout
#   scripts/localstack.sh stop      stop the server this script started (idempotent)
#   scripts/localstack.sh status    exit 0 iff SQS and SNS on the port are both healthy
#
# Environment: LOCALSTACK_PORT (default 4566), LOCALSTACK_START_TIMEOUT (default 90 s),
# LOCALSTACK_PYTHON (default python3); see the kit's script.
#
# Only stdout of `start` is the endpoint, so callers can do
#   AWS_ENDPOINT_URL="$(scripts/localstack.sh start)"
set -euo pipefail

# Paths are derived from the script's own location so it works from any cwd (CI runs it from a
# fresh clone in another folder). The venv under target/ is the one the Rust kit finds for this
# workspace's test binaries, so both install it once.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LOCALSTACK_HOME="$ROOT/target/localstack"  # build output, git-ignored via /target
export LOCALSTACK_DATA_ROOT="$ROOT/.localstack"   # git-ignored via /.localstack
exec bash "$ROOT/rust-stream/src/testing/localstack.sh" "$@"
