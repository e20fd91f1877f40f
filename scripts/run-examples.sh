#!/usr/bin/env bash
# The README's main job, end to end: a local PostgreSQL with pgflow, the example flows
# compiled, a worker serving them, one run of each example flow, then a clean stop. The
# flows that call HTTP reach a small API this script serves on loopback (scripts/demoapi).
# Called by `make run` once the binary, bin/demoapi and the example modules are built.
# The local PostgreSQL is stopped at the end if this script started it (its data stays in
# .pgdata); KEEP_DB=1 leaves it running. One that was running before is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/pgflow-wasm}
DEMOAPI=${DEMOAPI:-bin/demoapi}
DEMOAPI_ADDR=127.0.0.1:18480 # also in flows.yaml (http.allow of fetch_demo, checkout and ts_book)

step() { printf '\n== %s\n' "$*"; }

step "local PostgreSQL (.pgdata)"
db_was_running=
"$BIN" localdb status >/dev/null 2>&1 && db_was_running=1
# Says what happens to the server this script may have started, whatever the outcome.
release_db() {
	if [ -n "$db_was_running" ]; then
		echo "The local PostgreSQL was running before make run and is left running: stop it with \`$BIN localdb down\`."
	elif [ -n "${KEEP_DB:-}" ]; then
		echo "The local PostgreSQL is left running (KEEP_DB): look at the runs with \`DATABASE_URL=\$($BIN localdb url) $BIN runs\`; stop it with \`$BIN localdb down\`."
	elif "$BIN" localdb down >/dev/null; then
		echo "Stopped the local PostgreSQL this run started (its data stays in .pgdata: \`$BIN localdb up\` brings the runs back; KEEP_DB=1 make run leaves it running)."
	else
		echo "Could not stop the local PostgreSQL this run started: stop it with \`$BIN localdb down\`."
	fi
}
trap 'release_db' EXIT
DATABASE_URL=$("$BIN" localdb up)
export DATABASE_URL
echo "$DATABASE_URL"

step "pgmq + realtime.send + pgflow 0.8.1 schema"
"$BIN" db install
"$BIN" db status

step "the application's table and role for the ledger flow (scripts/ledger.sql)"
psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q -f scripts/ledger.sql
echo "app.ledger and role ledger_writer are in place"

step "flows.yaml: validate and compile"
"$BIN" validate --flows flows.yaml
"$BIN" compile --flows flows.yaml

step "the worker's login: pgflow_worker, not a superuser (docs/database.md)"
# Installing and compiling take the owner (here the superuser postgres); serving does not.
"$BIN" db grant-worker pgflow_worker
WORKER_URL=$("$BIN" localdb url --user pgflow_worker)
echo "$WORKER_URL"

step "demo API on $DEMOAPI_ADDR (scripts/demoapi, log in bin/demoapi.log)"
# The secret the checkout flow's handler reads by name (flows.yaml: env). A fresh one per
# run: it must show nowhere but in the API's Authorization check.
PAYMENTS_TOKEN="sk_demo_$(od -An -tx1 -N12 /dev/urandom | tr -d ' \n')"
export PAYMENTS_TOKEN PAYMENTS_URL="http://$DEMOAPI_ADDR"
"$DEMOAPI" -addr "$DEMOAPI_ADDR" >bin/demoapi.log 2>&1 &
api=$!
worker=
trap 'kill -9 $worker $api 2>/dev/null || true; release_db' EXIT
for _ in $(seq 50); do
	grep -q '^listening on' bin/demoapi.log && break
	if ! kill -0 "$api" 2>/dev/null; then cat bin/demoapi.log; exit 1; fi
	sleep 0.1
done
grep -q '^listening on' bin/demoapi.log || { echo "the demo API did not start:"; cat bin/demoapi.log; exit 1; }
cat bin/demoapi.log

step "worker: pgflow-wasm serve (log in bin/serve.log)"
"$BIN" serve --database-url "$WORKER_URL" --flows flows.yaml --signal notify --log-format text --log-level warn >bin/serve.log 2>&1 &
worker=$!
# Runs are started once the worker serves every flow (its rows in pgflow.workers).
flows=$(grep -cE '^  - (slug|flow):' flows.yaml) # each flow file here exports one flow
for _ in $(seq 300); do
	live=$(psql "$DATABASE_URL" -Atqc "select count(*) from pgflow.workers where deprecated_at is null and last_heartbeat_at > now() - interval '1 minute'" 2>/dev/null || echo 0)
	[ "${live:-0}" -ge "$flows" ] && break
	if ! kill -0 "$worker" 2>/dev/null; then cat bin/serve.log; exit 1; fi
	sleep 0.1
done

status=0
run() {
	local flow=$1 input=$2
	step "run $flow $input"
	if ! "$BIN" start "$flow" --input "$input" --wait --timeout 2m; then
		status=1
	fi
}
# A run that must fail, with the message it must fail with.
run_refused() {
	local flow=$1 input=$2 want=$3 out
	step "run $flow $input (refused on purpose)"
	if out=$("$BIN" start "$flow" --input "$input" --wait --timeout 2m 2>&1); then
		echo "$out"; echo "the run succeeded, but it should have been refused"; status=1
	elif grep -qF "$want" <<<"$out"; then
		echo "$out"
	else
		echo "$out"; echo "the run failed without the expected message: $want"; status=1
	fi
}
# A run that must complete with an output holding want.
run_expect() {
	local flow=$1 input=$2 want=$3 out
	step "run $flow $input"
	if ! out=$("$BIN" start "$flow" --input "$input" --wait --timeout 2m 2>&1); then
		echo "$out"; status=1
	elif grep -qF "$want" <<<"$out"; then
		echo "$out"
	else
		echo "$out"; echo "the run's output does not hold $want"; status=1
	fi
}
run hello '{"name": "Ada"}'
run word_totals '["the quick brown fox", "jumps over the lazy dog"]'
run fetch_demo "{\"url\": \"http://$DEMOAPI_ADDR/hello.json\"}"
run fetch_demo "{\"url\": \"http://$DEMOAPI_ADDR/missing\"}"
run_refused fetch_demo '{"url": "https://example.com/"}' 'host example.com:443 is not allowed'
run checkout '{"amount": 1200, "currency": "eur", "customer": "cus_42"}'
run ledger '{"amount": 5}'
run ts_book "{\"url\": \"http://$DEMOAPI_ADDR/hello.json\", \"amount\": 7}"
# A flow file served as it is; its fingerprint step hashes the text with crypto.subtle, and
# the run's output must carry the same SHA-256 as sha256sum's.
text='the quick brown fox\njumps over the lazy dog'
run_expect text_stats "{\"text\": \"$text\"}" "$(printf "$text" | sha256sum | cut -d' ' -f1)"

step "stopping the worker (SIGTERM: drain, deregister, exit 0)"
kill -TERM "$worker"
if wait "$worker"; then
	echo "worker stopped cleanly"
else
	echo "worker exited with status $?; its log:"; cat bin/serve.log; status=1
fi
kill -TERM "$api" 2>/dev/null && wait "$api" 2>/dev/null || true
trap 'release_db' EXIT
if grep -qF "$PAYMENTS_TOKEN" bin/serve.log; then
	echo "the secret PAYMENTS_TOKEN shows in bin/serve.log"; status=1
fi
if [ -s bin/serve.log ]; then
	step "worker warnings (bin/serve.log)"
	cat bin/serve.log
fi
exit $status
