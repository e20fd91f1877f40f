# promtool checks the Helm chart's alert rules and the Grafana dashboard's queries, and runs
# the alert rules over a real worker's scraped /metrics (deploy/alerts_test.go). Debian's
# prometheus package carries it; installed only when missing (the server it also installs is
# not started by the tests).
PROMTOOL_APT_PACKAGES ?= prometheus

.PHONY: promtool
promtool:
	@command -v promtool >/dev/null || { \
		echo "installing promtool ($(PROMTOOL_APT_PACKAGES))"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(PROMTOOL_APT_PACKAGES) || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(PROMTOOL_APT_PACKAGES); }; }

deps: promtool
