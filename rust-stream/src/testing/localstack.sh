#!/usr/bin/env bash
# Runs a real LocalStack (SQS and SNS) on this machine WITHOUT Docker, so that tests can talk to
# genuine SQS and SNS implementations over loopback. One script for two callers: the repository's
# `scripts/localstack.sh` runs it for the project's own tests, and `rust_stream::testing::LocalStack`
# (feature `testing`) carries it inside the crate (`include_str!`), writes it out and runs it for a
# downstream crate's tests, which have no checkout of this repository. The pinned LocalStack
# version is here and nowhere else.
#
#   localstack.sh install   create/refresh the cached virtualenv
#   localstack.sh start     install if needed, start, wait until SQS and SNS are up,
#                           print the endpoint URL on stdout
#   localstack.sh stop      stop the server this script started on the port (idempotent)
#   localstack.sh status    exit 0 iff SQS, SNS and S3 on the port are all healthy
#   localstack.sh serve     `start`, then hold the server until standard input closes (or a
#                           signal comes), then `stop` it: a test process keeps the pipe to this
#                           script open while it lives, so the server ends with it, however it ends
#
# Environment:
#   LOCALSTACK_HOME           where the venv, logs and pid files go (required: the repository's
#                             wrapper passes `target/localstack`, the Rust kit its target dir's)
#   LOCALSTACK_DATA_ROOT      LocalStack's own files, one folder per port (default $LOCALSTACK_HOME/data)
#   LOCALSTACK_PORT           port to listen on (default 4566), bound to 127.0.0.1 only
#   LOCALSTACK_START_TIMEOUT  seconds to wait for health on start (default 90)
#   LOCALSTACK_PYTHON         interpreter used to build the venv (default python3)
#
# Needs Linux (setsid, flock, /proc), bash, curl and Python 3.11 or newer with venv (or pip).
# Only stdout of `start` and `serve` is the endpoint, so callers can do
#   AWS_ENDPOINT_URL="$(localstack.sh start)"
# Everything else (progress, errors) goes to stderr.
set -euo pipefail

STATE_DIR="${LOCALSTACK_HOME:?LOCALSTACK_HOME must name the folder to install LocalStack in}"
VENV="$STATE_DIR/venv"
MARKER="$VENV/.requirements"             # records what the venv was built from
LOCK="$STATE_DIR/install.lock"
PORT="${LOCALSTACK_PORT:-4566}"
# One server per port, each with its own log, pid and files, so that test runs on different
# ports (a free one per run) share nothing but the venv.
RUN_DIR="$STATE_DIR/port-$PORT"
LOG="$RUN_DIR/localstack.log"
PIDFILE="$RUN_DIR/localstack.pid"
DATA_DIR="${LOCALSTACK_DATA_ROOT:-$STATE_DIR/data}/port-$PORT"

HOST="127.0.0.1"
ENDPOINT="http://$HOST:$PORT"
START_TIMEOUT="${LOCALSTACK_START_TIMEOUT:-90}"
PYTHON="${LOCALSTACK_PYTHON:-python3}"

# Pinned set known to work on CPython 3.11 (newer localstack-core needs 3.12).
# The extra upper bounds avoid known breakages of 4.13.1 with newer releases
# of those libraries. Changing this line makes `install` rebuild the venv.
REQUIREMENTS=(
  "localstack-core[runtime]==4.13.1"
  "cbor2<5.7"
  "pyopenssl<24.3"
  "cryptography<44"
  "service_identity"
)
REQ_LINE="${REQUIREMENTS[*]}"

log() { printf 'localstack.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- install ---------------------------------------------------------------

venv_ok() {
  [[ -x "$VENV/bin/python" ]] &&
    [[ -f "$MARKER" ]] &&
    [[ "$(cat "$MARKER")" == "$REQ_LINE" ]] &&
    "$VENV/bin/python" -c 'import localstack.runtime.main' >/dev/null 2>&1
}

make_venv() {
  rm -rf "$VENV"
  # Normal path: the interpreter's venv module bundles pip via ensurepip.
  if "$PYTHON" -m venv "$VENV" >/dev/null 2>&1 && [[ -x "$VENV/bin/pip" ]]; then
    return 0
  fi
  # Debian's /usr/bin/python3 ships venv without ensurepip unless python3-venv
  # is installed. Build the venv without pip, then let the system pip (>=22.3
  # understands --python) install pip into it.
  log "python3 -m venv without ensurepip; falling back to --without-pip"
  rm -rf "$VENV"
  "$PYTHON" -m venv --without-pip "$VENV"
  if "$PYTHON" -m pip --python "$VENV/bin/python" install --quiet pip >&2; then
    return 0
  fi
  # Last resort on Debian-like machines where we are root: the proper package.
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing python3-venv with apt-get"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    return 0
  fi
  die "cannot create a virtualenv with pip using $PYTHON"
}

do_install() {
  mkdir -p "$STATE_DIR"
  # Serialise concurrent installs (e.g. two test jobs calling `start` at once).
  exec 9>"$LOCK"
  flock 9
  if venv_ok; then
    log "venv up to date ($VENV)"
    exec 9>&-
    return 0
  fi
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found"
  log "creating venv in $VENV with $("$PYTHON" --version 2>&1)"
  make_venv
  log "pip install $REQ_LINE"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "${REQUIREMENTS[@]}" >&2
  "$VENV/bin/python" -c 'import localstack.runtime.main' ||
    die "localstack installed but does not import"
  # Marker written last: an interrupted install is redone next time.
  printf '%s' "$REQ_LINE" >"$MARKER"
  log "installed"
  exec 9>&-
}

# --- health ----------------------------------------------------------------

# True when /_localstack/health on the port reports sqs, sns and s3 in one of
# the given states (an extended regex; default: "available" = enabled but loaded
# lazily on first request, or "running" = loaded). All are required: a server
# started by an older copy of this script (SQS alone, or SQS and SNS) on the
# same port is not taken for a healthy one.
healthy() {
  local states="${1:-available|running}" body service
  body="$(curl -fsS --max-time 2 "$ENDPOINT/_localstack/health" 2>/dev/null)" || return 1
  for service in sqs sns s3; do
    grep -Eq "\"$service\": *\"($states)\"" <<<"$body" || return 1
  done
}

# PID from the pid file, only if that process is still our LocalStack
# (guards against the pid having been recycled by an unrelated process).
our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'localstack.runtime.main' || return 1
  echo "$pid"
}

# Running and not a zombie (a zombie still answers kill -0 until reaped).
# Read from /proc (Linux only, like setsid) so procps is not needed.
alive() {
  local st
  st="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  st="${st##*) }" # state letter follows the ")" that closes the command name
  [[ -n "$st" && "${st:0:1}" != Z ]]
}

port_in_use() {
  # bash's /dev/tcp: a successful connect means something listens there.
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

# --- start / stop ----------------------------------------------------------

do_start() {
  mkdir -p "$STATE_DIR" "$RUN_DIR"
  # One `start` at a time: two racing starts would both see a free port, both
  # launch, and the loser would overwrite the pid file. The second caller
  # waits here and then finds the first one healthy. (fd 8 is closed for the
  # server below, so the lock is released when this script exits.)
  exec 8>"$RUN_DIR/start.lock"
  flock 8

  if healthy; then
    log "reusing healthy LocalStack on $ENDPOINT"
    echo "$ENDPOINT"
    return 0
  fi

  local pid=""
  if pid="$(our_pid)"; then
    # Started earlier but not healthy yet (e.g. a parallel `start`): just wait.
    log "LocalStack (pid $pid) already starting; waiting"
  else
    port_in_use && die "port $PORT is in use by something that is not a healthy LocalStack"
    do_install
    mkdir -p "$DATA_DIR"
    : >"$LOG"
    log "starting LocalStack on $ENDPOINT (log: $LOG)"
    STARTED_HERE=1
    # Why each setting (LocalStack 4.13.1 running on the host, not in Docker):
    #   OVERRIDE_IN_DOCKER=0   this machine has /.dockerenv, so LocalStack would think
    #                          it is in its own image and write /var/lib/localstack,
    #                          /etc/localstack; host mode keeps it all in FILESYSTEM_ROOT
    #   GATEWAY_LISTEN         bind loopback only, on our port
    #   GATEWAY_SERVER         the default (twisted) ignores the host part of
    #                          GATEWAY_LISTEN and binds 0.0.0.0; hypercorn honours it
    #   LOCALSTACK_HOST        host:port put into returned QueueUrls; the default
    #                          localhost.localstack.cloud needs public DNS (none here)
    #   SERVICES / EAGER_...   only SQS, SNS (topics that deliver to SQS queues) and S3 (large payloads),
    #                          loaded at startup (health says "running" for both),
    #                          not on the first request (health would say
    #                          "available" and the first test would pay the load)
    #   PERSISTENCE=0          every start is a clean slate
    #   SQS_ENDPOINT_STRATEGY  QueueUrl = http://HOST:PORT/queue/REGION/ACCOUNT/NAME
    #   FILESYSTEM_ROOT        host mode puts its whole tree (var/lib/localstack with the
    #                          self-signed cert, tmp/localstack/state) here; default is
    #                          inside the venv's site-packages
    #   XDG_CACHE_HOME         plux (LocalStack's plugin loader) caches entry points in
    #                          ~/.cache/plux otherwise
    #   DNS_ADDRESS=0          don't start LocalStack's DNS server (would bind port 53)
    #   SKIP_SSL_CERT_DOWNLOAD no network: don't try to fetch the TLS cert at startup
    #   DISABLE_EVENTS         no analytics calls home
    # setsid: own session/process group, so `stop` can kill the whole tree and
    # so it survives the calling shell. nohup + </dev/null: detached from the
    # terminal. `env` keeps the settings local to this process.
    env \
      OVERRIDE_IN_DOCKER=0 \
      GATEWAY_LISTEN="$HOST:$PORT" \
      GATEWAY_SERVER=hypercorn \
      LOCALSTACK_HOST="$HOST:$PORT" \
      SERVICES=sqs,sns,s3 \
      EAGER_SERVICE_LOADING=1 \
      PERSISTENCE=0 \
      SQS_ENDPOINT_STRATEGY=path \
      FILESYSTEM_ROOT="$DATA_DIR/filesystem" \
      XDG_CACHE_HOME="$DATA_DIR/cache" \
      DNS_ADDRESS=0 \
      SKIP_SSL_CERT_DOWNLOAD=1 \
      DISABLE_EVENTS=1 \
      setsid nohup "$VENV/bin/python" -m localstack.runtime.main \
      >>"$LOG" 2>&1 </dev/null 8>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
  fi

  local start=$SECONDS
  while ((SECONDS - start < START_TIMEOUT)); do
    # Also wait for the "Ready." line: health says "running" a moment before
    # the runtime finishes starting, and a TERM in that window can hang
    # LocalStack's shutdown (seen when a test run stops it right away).
    if healthy running && grep -qx 'Ready\.' "$LOG"; then
      log "healthy after $((SECONDS - start))s"
      echo "$ENDPOINT"
      return 0
    fi
    if ! alive "$pid"; then
      log "LocalStack exited during startup; last log lines:"
      tail -n 50 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      exit 1
    fi
    sleep 0.5
  done
  log "not healthy after ${START_TIMEOUT}s; last log lines:"
  tail -n 50 "$LOG" >&2 || true
  do_stop
  exit 1
}

do_stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    log "not running (nothing started by this script)"
    return 0
  fi
  # The server is its own process-group leader (setsid), so -PID reaches
  # every child it spawned. TERM first for a clean shutdown (~2 s), KILL if it
  # hangs: a TERM right after startup sometimes never completes, and with
  # PERSISTENCE=0 there is nothing to lose.
  kill -TERM -- "-$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 40; i++)); do
    alive "$pid" || break
    sleep 0.25
  done
  if alive "$pid"; then
    log "still alive after 10s; sending KILL"
    kill -KILL -- "-$pid" 2>/dev/null || true
    # Wait for the kernel to reap it, so the port is free when we return.
    for ((i = 0; i < 20; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
  fi
  rm -f "$PIDFILE"
  log "stopped (pid $pid)"
}

do_status() {
  if healthy; then
    log "healthy on $ENDPOINT"
    return 0
  fi
  log "not healthy on $ENDPOINT"
  return 1
}

# Set by do_start when it launched the server (rather than finding one healthy): `serve` stops
# only what it started.
STARTED_HERE=0

do_serve() {
  # Whatever ends this script from here on stops the server it started: the caller going away
  # (its pipe closed) during a long install, a signal, a failed start.
  trap '[[ "$STARTED_HERE" == 1 ]] && do_stop; [[ -n "${held:-}" ]] && kill "$held" 2>/dev/null; true' EXIT
  trap 'exit 130' INT TERM HUP
  trap 'exit 141' PIPE
  # In this shell (not a subshell), so that STARTED_HERE is seen; its stdout, the endpoint, goes
  # straight to the caller.
  do_start
  # The start lock is held on fd 8 until here; a server that runs for the life of a test process
  # must not hold it, or a `start` on the same port would wait for the process to end.
  exec 8>&-
  # `cat` ends when the caller closes its end of the pipe, on purpose or by exiting. In the
  # background, so that a signal's trap runs at once rather than after it.
  cat <&0 >/dev/null &
  held=$!
  wait "$held" || true
  held=""
}

case "${1:-}" in
  install) do_install ;;
  start) do_start ;;
  serve) do_serve ;;
  stop) do_stop ;;
  status) do_status ;;
  *)
    echo "usage: $0 {install|start|stop|status|serve}" >&2
    exit 2
    ;;
esac
