#!/usr/bin/env bash
# The README's main job, end to end: a local PostgreSQL with pgflow, the example flows
# compiled, a worker serving them, one run of each example flow, then a clean stop.
# Called by `make run` once the binary and the example modules are built.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/pgflow-wasm}

step() { printf '\n== %s\n' "$*"; }

step "local PostgreSQL (.pgdata)"
DATABASE_URL=$("$BIN" localdb up)
export DATABASE_URL
echo "$DATABASE_URL"

step "pgmq + realtime.send + pgflow 0.8.1 schema"
"$BIN" db install
"$BIN" db status

step "flows.yaml: validate and compile"
"$BIN" validate --flows flows.yaml
"$BIN" compile --flows flows.yaml

step "worker: pgflow-wasm serve (log in bin/serve.log)"
"$BIN" serve --flows flows.yaml --signal notify --log-format text --log-level warn >bin/serve.log 2>&1 &
worker=$!
trap 'kill -9 $worker 2>/dev/null || true' EXIT

status=0
run() {
	local flow=$1 input=$2
	step "run $flow $input"
	if ! "$BIN" start "$flow" --input "$input" --wait --timeout 2m; then
		status=1
	fi
}
run hello '{"name": "Ada"}'
run word_totals '["the quick brown fox", "jumps over the lazy dog"]'

step "stopping the worker (SIGTERM: drain, deregister, exit 0)"
kill -TERM "$worker"
if wait "$worker"; then
	echo "worker stopped cleanly"
else
	echo "worker exited with status $?; its log:"; cat bin/serve.log; status=1
fi
trap - EXIT
if [ -s bin/serve.log ]; then
	step "worker warnings (bin/serve.log)"
	cat bin/serve.log
fi
exit $status
