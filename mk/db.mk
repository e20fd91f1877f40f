# Database pieces: the npm-pinned pgflow schema and the PostgreSQL server the tests and
# `make run` use (a local cluster in .pgdata, managed by `pgflow-wasm localdb`).
#
# Targets:
#   node_modules     npm ci from package-lock.json (pgflow's SQL migrations, @pgflow/core 0.8.1)
#   postgres-server  apt-get install postgresql-15 when no PostgreSQL 14+ server binaries exist
#   db-deps          both of the above
#   localdb-up       start the dev cluster (.pgdata) and install pgmq + pgflow into it

NPM ?= npm
PG_APT_PACKAGES ?= postgresql-15 postgresql-contrib

.PHONY: postgres-server db-deps localdb-up localdb-down

# npm ci is re-run only when the lock file is newer than the installed tree.
node_modules: package-lock.json package.json
	$(NPM) ci --no-audit --no-fund
	@touch node_modules

# pgflow's SQL, built into the binary (schema/pgflowsql): the pinned release's migrations and
# version, copied from npm. Generated, never committed; `build` and `test` need it.
PGFLOW_SQL := schema/pgflowsql/migrations/VERSION
PGFLOW_NPM := node_modules/@pgflow/core
$(PGFLOW_SQL): node_modules
	rm -f schema/pgflowsql/migrations/*.sql
	cp $(PGFLOW_NPM)/dist/supabase/migrations/*.sql schema/pgflowsql/migrations/
	node -p 'require("./$(PGFLOW_NPM)/package.json").version' > $@

# The server binaries live in /usr/lib/postgresql/<major>/bin on Debian; any major >= 14 will do.
postgres-server:
	@found=; for p in /usr/lib/postgresql/*/bin/postgres; do \
		v=$${p#/usr/lib/postgresql/}; v=$${v%%/*}; \
		if [ -x "$$p" ] && [ "$$v" -ge 14 ] 2>/dev/null; then found=$$p; fi; \
	done; \
	if [ -n "$$found" ]; then \
		echo "PostgreSQL server: $$found"; \
	else \
		echo "installing PostgreSQL server ($(PG_APT_PACKAGES))"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PG_APT_PACKAGES) || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PG_APT_PACKAGES); }; \
	fi

db-deps: node_modules postgres-server

# make deps (root Makefile) also needs a server for the tests.
deps: postgres-server

localdb-up: db-deps build
	$(BIN) localdb up
	DATABASE_URL=$$($(BIN) localdb url) $(BIN) db install
	DATABASE_URL=$$($(BIN) localdb url) $(BIN) db grant-worker pgflow_worker

localdb-down: build
	$(BIN) localdb down
