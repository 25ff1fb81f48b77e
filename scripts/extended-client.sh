#!/usr/bin/env bash
# AWS's Python SQS extended client (amazon-sqs-extended-client from PyPI, over boto3), installed in
# a virtualenv under target/extended-client, for the test that checks rust-stream's large payloads
# against another client on LocalStack (tests/large_payloads.rs).
#
#   scripts/extended-client.sh install
#       install if needed (python3 with venv, as LocalStack needs)
#   scripts/extended-client.sh send ENDPOINT QUEUE_URL BUCKET [legacy] < BODY
#       send standard input as one message through S3 (always), as the client writes it; with
#       `legacy`, in its legacy form (SQSLargePayloadSize and Java 1.x's pointer class)
#   scripts/extended-client.sh receive ENDPOINT QUEUE_URL
#       receive one message with the client (waiting up to 20 s) and print its body, as the
#       client resolves it, on stdout; exit 1 when none came
#
# Everything but a received body goes to stderr. Credentials are LocalStack's test ones.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/target/extended-client"       # build output, git-ignored via /target
LOCK="$DIR/install.lock"
PACKAGE="amazon-sqs-extended-client==1.0.1"   # changing it reinstalls
MARKER="$DIR/venv/.installed"

log() { printf 'extended-client.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

installed() {
  [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$PACKAGE" ]]
}

install() {
  mkdir -p "$DIR"
  exec 9>"$LOCK"
  flock 9
  if installed; then
    return 0
  fi
  command -v python3 >/dev/null || die "python3 is needed"
  log "installing $PACKAGE in $DIR/venv"
  rm -rf "$DIR/venv"
  python3 -m venv "$DIR/venv" >&2 || die "python3 -m venv failed (install python3-venv)"
  "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "$PACKAGE" >&2
  echo "$PACKAGE" >"$MARKER"
  exec 9>&-
}

# The client's side, written next to the venv (standard input is the body a `send` sends, so the
# script cannot come that way).
write_script() {
  cat >"$DIR/interop.py" <<'PYTHON'
import sys

import boto3
from botocore.config import Config
import sqs_extended_client  # noqa: F401  (extends boto3's SQS client on import)

command, endpoint, queue_url = sys.argv[1], sys.argv[2], sys.argv[3]
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
sqs = boto3.client("sqs", endpoint_url=endpoint)
sqs.s3_client = s3
if command == "send":
    bucket = sys.argv[4]
    sqs.large_payload_support = bucket
    sqs.always_through_s3 = True
    sqs.use_legacy_attribute = len(sys.argv) > 5 and sys.argv[5] == "legacy"
    body = sys.stdin.read()
    extra = {}
    if queue_url.endswith(".fifo"):
        extra = {"MessageGroupId": "interop", "MessageDeduplicationId": str(abs(hash(body)))}
    answer = sqs.send_message(QueueUrl=queue_url, MessageBody=body, **extra)
    print(f"sent {answer['MessageId']}", file=sys.stderr)
elif command == "receive":
    sqs.large_payload_support = "unused-for-reading"
    answer = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=1,
        WaitTimeSeconds=20,
        MessageAttributeNames=["All"],
    )
    messages = answer.get("Messages", [])
    if not messages:
        print("no message came", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(messages[0]["Body"])
else:
    print(f"unknown command {command}", file=sys.stderr)
    sys.exit(2)
PYTHON
}

run_python() {
  write_script
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
    "$DIR/venv/bin/python" "$DIR/interop.py" "$@"
}

case "${1:-}" in
  install) install ;;
  send)
    [[ $# -ge 4 ]] || die "usage: send ENDPOINT QUEUE_URL BUCKET [legacy] < BODY"
    install
    shift
    run_python send "$@"
    ;;
  receive)
    [[ $# -eq 3 ]] || die "usage: receive ENDPOINT QUEUE_URL"
    install
    shift
    run_python receive "$@"
    ;;
  *) die "usage: $0 install | send ENDPOINT QUEUE_URL BUCKET [legacy] | receive ENDPOINT QUEUE_URL" ;;
esac
