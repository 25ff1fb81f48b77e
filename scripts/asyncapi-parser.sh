#!/usr/bin/env bash
# The official AsyncAPI parser (@asyncapi/parser from npm, run by Node), installed under
# target/asyncapi-parser, for the test that validates the examples' AsyncAPI documents
# (tests/asyncapi.rs).
#
#   scripts/asyncapi-parser.sh install          install if needed (Node and npm with apt-get
#                                               when missing and root)
#   scripts/asyncapi-parser.sh validate FILE..  install if needed, parse each document, print one
#                                               JSON line per diagnostic ({file, code, severity,
#                                               message, path}) on stdout; exit 1 when a document
#                                               does not parse
#
# Everything but the diagnostics (progress, errors) goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/target/asyncapi-parser"       # build output, git-ignored via /target
LOCK="$DIR/install.lock"
PACKAGE="@asyncapi/parser@3.6.6"          # changing it reinstalls
MARKER="$DIR/node_modules/.installed"

log() { printf 'asyncapi-parser.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

installed() {
  [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$PACKAGE" ]] && command -v node >/dev/null
}

ensure_node() {
  if command -v node >/dev/null && command -v npm >/dev/null; then
    return 0
  fi
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing nodejs and npm with apt-get"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
    return 0
  fi
  die "node and npm are needed; install Node.js (18 or later)"
}

do_install() {
  mkdir -p "$DIR"
  # Serialise concurrent installs (two test runs at once).
  exec 9>"$LOCK"
  flock 9
  if installed; then
    exec 9>&-
    return 0
  fi
  ensure_node
  log "npm install $PACKAGE in $DIR"
  [[ -f "$DIR/package.json" ]] || printf '{"private": true}\n' >"$DIR/package.json"
  (cd "$DIR" && npm install --silent --no-audit --no-fund --save-exact "$PACKAGE" >&2) ||
    die "npm install $PACKAGE failed"
  # Marker written last: an interrupted install is redone next time.
  printf '%s' "$PACKAGE" >"$MARKER"
  log "installed"
  exec 9>&-
}

# The validator: parses each file and prints its diagnostics as JSON lines.
VALIDATE_JS='
import { Parser } from "@asyncapi/parser";
import { readFileSync } from "node:fs";
const parser = new Parser();
let failed = false;
for (const file of process.argv.slice(1)) {
  const { document, diagnostics } = await parser.parse(readFileSync(file, "utf8"));
  for (const d of diagnostics) {
    console.log(JSON.stringify({ file, code: d.code, severity: d.severity, message: d.message, path: d.path }));
  }
  if (!document) { console.error(`${file}: not a valid AsyncAPI document`); failed = true; }
}
process.exit(failed ? 1 : 0);
'

do_validate() {
  [[ $# -gt 0 ]] || die "validate needs at least one file"
  do_install
  local files=()
  local file
  for file in "$@"; do files+=("$(cd "$(dirname "$file")" && pwd)/$(basename "$file")"); done
  # Run from the install folder, so `import` finds its node_modules.
  cd "$DIR" && node --input-type=module -e "$VALIDATE_JS" "${files[@]}"
}

case "${1:-}" in
  install) do_install ;;
  validate) shift; do_validate "$@" ;;
  *)
    echo "usage: $0 {install|validate FILE..}" >&2
    exit 2
    ;;
esac
