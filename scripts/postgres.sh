#!/usr/bin/env bash
# Runs a real PostgreSQL on this machine for the tests of the inbox and outbox stores, WITHOUT
# Docker: this machine's server binaries, a cluster under target/, on loopback.
#
#   scripts/postgres.sh start    start a server on 127.0.0.1:$POSTGRES_PORT (a free port when unset),
#                                wait until it accepts connections, print its URL on stdout:
#                                postgres://postgres@127.0.0.1:PORT/postgres
#   scripts/postgres.sh stop     stop the server this script started on $POSTGRES_PORT (every one
#                                it started in this checkout when unset); idempotent
#   scripts/postgres.sh status   exit 0 iff a server accepts connections on $POSTGRES_PORT (when
#                                unset: iff one this script started runs, its URLs on stdout)
#
# Environment: POSTGRES_PORT, POSTGRES_START_TIMEOUT (default 60 s), POSTGRES_BIN (the folder of
# initdb, pg_ctl, pg_isready and postgres; found on PATH or under /usr/lib/postgresql otherwise).
#
# Only stdout of `start` is the URL, so callers can do
#   RUST_STREAM_POSTGRES_URL="$(scripts/postgres.sh start)"
# Everything else (progress, errors) goes to stderr.
#
# Every start is a clean slate, as LocalStack's is: the cluster is made once (initdb, about a
# second) as a template under target/postgres/, and each start copies it to
# target/postgres/<port>/data; `stop` deletes that copy and keeps the server's log,
# target/postgres/<port>/postgres.log. The server trusts every local connection and does not
# fsync: it is for tests, its data is thrown away.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The folder the script's files go in: a link to a folder in /tmp instead when the server's user
# cannot reach target/ (see prepare_base).
LINK="$ROOT/target/postgres"
HOST="127.0.0.1"
START_TIMEOUT="${POSTGRES_START_TIMEOUT:-60}"
# The server refuses to run as root, so root runs it as the user the distribution's package makes.
SERVER_USER="postgres"

log() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

url() { echo "postgres://postgres@$HOST:$1/postgres"; }

# --- binaries ----------------------------------------------------------------

# The folder holding initdb, pg_ctl, pg_isready and postgres, the four of one installation (on
# Debian /usr/bin/pg_isready is a wrapper script and initdb is not on PATH at all, so the folder
# is found through pg_ctl, links resolved).
find_bin() {
  local candidate dir
  for candidate in ${POSTGRES_BIN:+"$POSTGRES_BIN/pg_ctl"} "$(command -v pg_ctl || true)" \
    $(printf '%s\n' /usr/lib/postgresql/*/bin/pg_ctl | sort -V -r); do
    [[ -n "$candidate" && -x "$candidate" ]] || continue
    dir="$(dirname "$(readlink -f "$candidate")")"
    if [[ -x "$dir/initdb" && -x "$dir/pg_isready" && -x "$dir/postgres" ]]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

# find_bin, installing the server package first when it finds nothing and this is a Debian-like
# machine where we are root (CI's fresh machine); anywhere else, say what to install.
bin_or_install() {
  if BIN="$(find_bin)"; then
    return 0
  fi
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    log "no PostgreSQL server binaries; installing the postgresql package with apt-get"
    # The package may also start a cluster of its own on port 5432 where services run (not in a
    # container); the tests never use it.
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    BIN="$(find_bin)" && return 0
  fi
  die "no PostgreSQL server binaries (initdb, pg_ctl): install the server (Debian/Ubuntu: apt-get install postgresql), or name their folder in POSTGRES_BIN"
}

# --- the server's user and folders -------------------------------------------

# Runs a command as the server's user: postgres when we are root (initdb and pg_ctl refuse root),
# ourselves otherwise. From /, which that user can read whatever our working folder is.
as_server() {
  if [[ $EUID -eq 0 ]]; then
    (cd / && runuser -u "$SERVER_USER" -- "$@")
  else
    "$@"
  fi
}

# Makes a folder (and its parents) owned by the server's user.
server_dir() {
  mkdir -p "$1"
  if [[ $EUID -eq 0 ]]; then
    chown "$SERVER_USER:" "$1"
  fi
}

# BASE: where the template and the servers' folders are, reachable by the server's user. That is
# target/postgres, unless a folder above the checkout is closed to that user (a clone under
# /root, a umask of 077): then target/postgres is a link to a folder of our own in /tmp (not
# $TMPDIR, which may be private too), and the server's user is given the real path.
prepare_base() {
  if [[ $EUID -eq 0 ]] && ! id -u "$SERVER_USER" >/dev/null 2>&1; then
    die "no user $SERVER_USER to run the server as (the postgresql package makes it)"
  fi
  if [[ -L "$LINK" ]]; then
    if [[ -d "$LINK" ]]; then
      BASE="$(readlink -f "$LINK")"
      return 0
    fi
    rm -f "$LINK" # its folder in /tmp was cleaned away
  fi
  server_dir "$LINK"
  if as_server test -w "$LINK" -a -x "$LINK"; then
    BASE="$LINK"
    return 0
  fi
  rmdir "$LINK" 2>/dev/null || die "$SERVER_USER cannot reach $LINK, which holds files already"
  BASE="$(mktemp -d /tmp/rust-stream-postgres.XXXXXX)"
  chmod 755 "$BASE"
  server_dir "$BASE"
  ln -s "$BASE" "$LINK"
  log "$SERVER_USER cannot reach $ROOT/target (a folder above it is closed to it): files in $BASE, linked from $LINK"
}

# BASE as prepare_base left it, for stop and status, which make nothing: fails when no server was
# ever started here.
existing_base() {
  [[ -d "$LINK" ]] || return 1
  BASE="$(readlink -f "$LINK")"
}

# The template cluster, made once per checkout (and again when the binaries change). One make at
# a time, for starts on two ports at once. Its marker is written last, so an interrupted make is
# redone.
ensure_template() {
  local template="$BASE/template" marker="$BASE/template.made-by" made_by
  made_by="$("$BIN/initdb" --version) in $BIN"
  exec 9>"$BASE/template.lock"
  flock 9
  if [[ -d "$template" && -f "$marker" && "$(cat "$marker")" == "$made_by" ]]; then
    exec 9>&-
    return 0
  fi
  rm -rf "$template" "$template.new" "$marker"
  server_dir "$template.new"
  log "making the template cluster with $made_by"
  # -A trust: any local connection as any role, no password (a test server on loopback).
  # -N: no fsync of the files made, which halves initdb's time; a lost template is made again.
  # --no-locale: the same collation on every machine, whatever LANG says.
  if ! as_server "$BIN/initdb" -D "$template.new" -U postgres -A trust -E UTF8 --no-locale -N \
    >"$BASE/initdb.log" 2>&1 9>&-; then
    cat "$BASE/initdb.log" >&2
    die "initdb failed"
  fi
  mv "$template.new" "$template"
  printf '%s' "$made_by" >"$marker"
  exec 9>&-
}

# --- start / stop / status -----------------------------------------------------

accepts_connections() {
  "$BIN/pg_isready" -q -h "$HOST" -p "$1" -U postgres -d postgres -t 2 >/dev/null 2>&1
}

port_in_use() {
  # bash's /dev/tcp: a successful connect means something listens there.
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

do_start() {
  local port="${POSTGRES_PORT:-}"
  if [[ -z "$port" ]]; then
    # As scripts/test.sh chooses LocalStack's: a port the kernel has just handed out is free.
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  fi
  bin_or_install
  prepare_base
  local run_dir="$BASE/$port"
  local data="$run_dir/data" log_file="$run_dir/postgres.log"
  server_dir "$run_dir"
  # One start a port at a time: two racing starts would both copy the template and launch. (fd 8
  # is closed for the server below, so the lock ends with this script.)
  exec 8>"$run_dir/start.lock"
  flock 8

  if accepts_connections "$port"; then
    log "reusing the PostgreSQL that accepts connections on $HOST:$port"
    url "$port"
    return 0
  fi
  port_in_use "$port" && die "port $port is in use by something that is not a PostgreSQL"

  ensure_template
  rm -rf "$data"
  cp -a "$BASE/template" "$data"
  local sockets="$run_dir"
  # A Unix socket's path holds at most 107 bytes; a deep checkout gets TCP alone.
  if ((${#sockets} + ${#port} + 10 > 107)); then
    log "socket folder $sockets too long for a Unix socket: TCP only"
    sockets=""
  fi
  # Written into the copy, not passed with -o, so that no path is quoted for a shell.
  # fsync, synchronous_commit and full_page_writes off: a test server loses nothing it needs
  # when the machine crashes, and commits do not wait for the disk.
  cat >>"$data/postgresql.conf" <<EOF

# scripts/postgres.sh
listen_addresses = '$HOST'
port = $port
unix_socket_directories = '${sockets//\'/\'\'}'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  # The server's user writes the log, so pg_ctl makes it anew.
  rm -f "$log_file"
  log "starting PostgreSQL on $HOST:$port (log: $log_file)"
  # pg_ctl starts the server in a session of its own (it outlives this script and a Ctrl-C to the
  # caller's terminal) and waits until the server says it is ready.
  if ! as_server "$BIN/pg_ctl" start -D "$data" -l "$log_file" -w -t "$START_TIMEOUT" \
    >&2 8>&- 9>&-; then
    log "the server did not start; last log lines:"
    tail -n 30 "$log_file" >&2 || true
    do_stop_port "$port"
    exit 1
  fi
  local start=$SECONDS
  until accepts_connections "$port"; do
    if ((SECONDS - start >= START_TIMEOUT)); then
      log "no connection after ${START_TIMEOUT}s; last log lines:"
      tail -n 30 "$log_file" >&2 || true
      do_stop_port "$port"
      exit 1
    fi
    sleep 0.1
  done
  url "$port"
}

# Stops the server this script started on the port, if it runs, and deletes its data.
do_stop_port() {
  local port="$1" data="$BASE/$1/data"
  if [[ ! -d "$data" ]]; then
    log "nothing started by this script on port $port"
    return 0
  fi
  if as_server "$BIN/pg_ctl" status -D "$data" >/dev/null 2>&1; then
    # fast: roll back what the clients were doing and stop now; immediate when that hangs.
    as_server "$BIN/pg_ctl" stop -D "$data" -m fast -w -t 30 >&2 ||
      as_server "$BIN/pg_ctl" stop -D "$data" -m immediate -w -t 30 >&2
    log "stopped the server on port $port"
  else
    log "no server runs on port $port"
  fi
  rm -rf "$data"
}

do_stop() {
  existing_base || {
    log "nothing started by this script"
    return 0
  }
  BIN="$(find_bin)" || {
    log "no PostgreSQL binaries, so no server of this script runs"
    return 0
  }
  if [[ -n "${POSTGRES_PORT:-}" ]]; then
    do_stop_port "$POSTGRES_PORT"
    return 0
  fi
  local run_dir
  for run_dir in "$BASE"/*/; do
    [[ -d "$run_dir/data" && "$(basename "$run_dir")" =~ ^[0-9]+$ ]] || continue
    do_stop_port "$(basename "$run_dir")"
  done
}

do_status() {
  BIN="$(find_bin)" || {
    log "no PostgreSQL binaries"
    return 1
  }
  if [[ -n "${POSTGRES_PORT:-}" ]]; then
    if accepts_connections "$POSTGRES_PORT"; then
      log "accepting connections on $HOST:$POSTGRES_PORT"
      return 0
    fi
    log "nothing accepts connections on $HOST:$POSTGRES_PORT"
    return 1
  fi
  local run_dir port up=1
  if existing_base; then
    for run_dir in "$BASE"/*/; do
      port="$(basename "$run_dir")"
      [[ -d "$run_dir/data" && "$port" =~ ^[0-9]+$ ]] || continue
      if accepts_connections "$port"; then
        url "$port"
        up=0
      fi
    done
  fi
  ((up == 0)) || log "no server started by this script runs"
  return "$up"
}

case "${1:-}" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *)
    echo "usage: $0 {start|stop|status}" >&2
    exit 2
    ;;
esac
