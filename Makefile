# Tributary — the two commands a newcomer needs are `make demo` and `make test`.
# Both install what they need (deploy/local/install.sh) and bring up the local
# stack of real services (deploy/local/stack.sh).

SHELL := /bin/bash
export TRIBUTARY_HOME ?= $(CURDIR)/.stack
STACK := deploy/local/stack.sh
GO ?= go

.PHONY: help install up down purge status build demo demo-down test test-kafka-cluster test-chdb test-chart chaos test-cluster cluster-down fleet-verify fleet-down unit vet verify loadgen bench-loader

help:
	@echo "make demo    - install, start the stack + readers/loader/api, run traffic, print a tour"
	@echo "make test    - install, start the stack (real Kafka + embedded), run every test but the two below"
	@echo "make test-kafka-cluster - the 3-broker Kafka fault test alone (a node SIGKILLed under writes, ~60 s)"
	@echo "make test-chdb - the product's ClickHouse statements on current ClickHouse (chDB) vs 18.16"
	@echo "make chaos   - the chaos soak: the demo fleet on real Kafka under traffic and random faults, then a verdict (CHAOS_DURATION=30m)"
	@echo "make test-cluster - the ClickHouse cluster suite on its own stack (3 ClickHouse servers + ZooKeeper; make cluster-down stops it)"
	@echo "make unit    - unit tests only (no services)"
	@echo "make down    - stop the demo processes and the stack (make purge also deletes .stack)"
	@echo "make fleet-verify - a 32-shard fleet (FLEET_SHARDS=N) on its own stack: demo traffic, then make verify, each step timed (FLEET_FRESH=1: cold; FLEET_DOWN=1: stop after; else make fleet-down stops it)"
	@echo "make verify  - compare the running demo's API with the shards (scatter-gather ground truth; FLEET=file: another fleet file)"
	@echo "make loadgen ARGS=...  - more demo traffic (ARGS=\"--rows-per-op 100 --rate 50\": bulk, 5,000 rows/s)"
	@echo "make bench-loader - Kafka -> ClickHouse loader throughput (prints numbers)"
	@echo "make bench-peers  - our reader next to Debezium on the same shard and Kafka (ROWS=500000; docs/peers.md)"

install:
	deploy/local/install.sh

up: install
	$(STACK) up

build:
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

# The demo runs on the embedded Kafka broker by default (no JVM needed);
# TRIBUTARY_KAFKA=real make demo uses Apache Kafka instead. A stack that is
# already up keeps its Kafka kind (stack.sh stops kinds not asked for).
# TRIBUTARY_SECURE=1 make demo starts Apache Kafka with its SASL_SSL listener
# (real by default then: the embedded broker of the stack stays plaintext)
# and the demo's Kafka clients use it (deploy/local/demo.sh).
demo: install build
	TRIBUTARY_KAFKA=$${TRIBUTARY_KAFKA:-$$(sed -n 's/^TRIBUTARY_KAFKA_KIND=//p' $(TRIBUTARY_HOME)/stack.env 2>/dev/null | grep . || { [ "$${TRIBUTARY_SECURE:-0}" = 1 ] && echo real || echo embedded; })} $(STACK) up
	deploy/local/demo.sh

demo-down:
	deploy/local/demo.sh stop

down: demo-down
	$(STACK) down

purge: demo-down
	$(STACK) down --purge

status:
	$(STACK) status

vet:
	$(GO) vet ./...

unit:
	$(GO) test -count=1 ./internal/... ./cmd/... ./bench/...

# The whole suite against the real stack, but for the two tests that start
# servers of their own (OWN_SERVER_TESTS: a 3-node Kafka cluster; ClickHouse
# 18.16 beside chDB), which have their own commands below and run in CI
# (.ci/run) after it: together they would take make test past its budget
# of about 15 minutes (tests/README.md). TRIBUTARY_REQUIRE_STACK=1 turns a
# missing stack into a failure instead of a skip. TRIBUTARY_SECURE=1 adds
# Kafka's SASL_SSL listener beside the plaintext one, for the Kafka TLS and
# SASL tests (tests/kafka_secure_test.go).
OWN_SERVER_TESTS := TestKafkaClusterBrokerKilled$$|TestCurrentClickHouseAnswersAlike$$
test: install vet
	TRIBUTARY_SECURE=1 TRIBUTARY_KAFKA=both $(STACK) up
	TRIBUTARY_REQUIRE_STACK=1 TRIBUTARY_STACK_ENV=$(TRIBUTARY_HOME)/stack.env \
		$(GO) test -count=1 -timeout 60m -skip '$(OWN_SERVER_TESTS)' ./...

# The two tests make test leaves out (OWN_SERVER_TESTS), alone. The Kafka
# cluster test starts its own three KRaft nodes from the jar cache
# (tests/kafka_cluster_test.go); the chDB test its own ClickHouse 18.16 and
# the venv install.sh makes (tests/chdb_compat_test.go). Both use the
# stack's PostgreSQL/ClickHouse.
test-kafka-cluster: install
	TRIBUTARY_KAFKA=both $(STACK) up
	TRIBUTARY_REQUIRE_STACK=1 TRIBUTARY_STACK_ENV=$(TRIBUTARY_HOME)/stack.env \
		$(GO) test -count=1 -timeout 10m -v -run 'TestKafkaClusterBrokerKilled$$' ./tests

test-chdb: install
	TRIBUTARY_KAFKA=both $(STACK) up
	TRIBUTARY_REQUIRE_STACK=1 TRIBUTARY_STACK_ENV=$(TRIBUTARY_HOME)/stack.env \
		$(GO) test -count=1 -timeout 10m -v -run 'TestCurrentClickHouseAnswersAlike$$' ./tests

# The Helm chart (deploy/helm/charttest, its own Go module: helm lint, and
# every manifest decoded strictly into Kubernetes types). No stack needed.
test-chart:
	cd deploy/helm/charttest && $(GO) test -count=1 ./...

# The chaos soak (cmd/chaos, internal/chaos; docs/operations.md, "Verifying and benchmarking"): the demo
# fleet on real Kafka under mixed traffic with a seeded random fault
# schedule over every component for CHAOS_DURATION, then convergence, the
# verifier and one verdict; exit 1 when it fails. Not part of make test;
# CI runs the 5-minute version on a home and offset of its own
# (docs/operations.md, "Verifying and benchmarking"). The demo's processes must not
# run beside it (same ports): they are stopped first. CHAOS_FLAGS: more
# flags (--seed N repeats a schedule; bin/chaos --help).
CHAOS_DURATION ?= 30m
chaos: install build
	deploy/local/demo.sh stop
	TRIBUTARY_KAFKA=$$(sed -n 's/^TRIBUTARY_KAFKA_KIND=//p' $(TRIBUTARY_HOME)/stack.env 2>/dev/null | grep -x both || echo real) $(STACK) up
	bin/chaos --home $(TRIBUTARY_HOME) --duration $(CHAOS_DURATION) $(CHAOS_FLAGS)
# The ClickHouse cluster suite: its own stack (CLUSTER_HOME, ports at
# CLUSTER_PORT_OFFSET) with TRIBUTARY_CLICKHOUSE=cluster, 3 ClickHouse
# servers (2 shards, shard 1 with 2 replicas), ZooKeeper and 3 Kafka
# brokers; every pipeline of the harness then runs in cluster mode. The
# tests named here are the pipeline, verifier, API by-id, revenue (live and
# pre-aggregated), move index, compaction, duplicate and teardown tests of
# `make test`, plus tests/cluster_test.go (layout, bad configuration, and
# under writes a replica, a Kafka broker and ZooKeeper killed). `make test`
# itself never needs the cluster; make cluster-down stops it.
CLUSTER_HOME ?= $(CURDIR)/.stack-cluster
CLUSTER_PORT_OFFSET ?= 400
CLUSTER_TESTS := TestCluster|TestEndToEndTwoShards$$|TestVerify$$|TestAPIReadYourWrites$$|TestAPISearchAndDuplicates$$|TestRevenueEndToEnd$$|TestRevenuePreaggregateNeverStale$$|TestMoveIndex$$|TestLoaderCompacts$$|TestDuplicateIDs$$|TestClickHouseKilledMidLoad$$|TestAdminTeardown$$
test-cluster: install
	TRIBUTARY_HOME=$(CLUSTER_HOME) TRIBUTARY_PORT_OFFSET=$(CLUSTER_PORT_OFFSET) TRIBUTARY_KAFKA=real TRIBUTARY_KAFKA_BROKERS_COUNT=3 TRIBUTARY_CLICKHOUSE=cluster $(STACK) up
	TRIBUTARY_REQUIRE_STACK=1 TRIBUTARY_STACK_ENV=$(CLUSTER_HOME)/stack.env \
		$(GO) test -count=1 -timeout 30m -v -run '$(CLUSTER_TESTS)' ./tests

cluster-down:
	TRIBUTARY_HOME=$(CLUSTER_HOME) $(STACK) down

# A fleet of many shards on one machine, checked end to end (docs/deploy.md,
# "A fleet on one machine"; deploy/local/fleet-verify.sh): its own stack
# (FLEET_HOME, ports at FLEET_PORT_OFFSET) of FLEET_SHARDS PostgreSQL
# shards on Apache Kafka, the demo's processes (one cdc-reader process
# serving every shard, a loader, the API) and its traffic, then make
# verify; prints each step's time and the load, and exits non-zero when a
# step fails. FLEET_FRESH=1 purges the home first (a cold start);
# FLEET_DOWN=1 stops the stack at the end, passed or not (else it stays up
# for a look: make fleet-down stops it).
FLEET_SHARDS ?= 32
FLEET_HOME ?= $(CURDIR)/.stack-fleet
FLEET_PORT_OFFSET ?= 200
FLEET_FRESH ?= 0
FLEET_DOWN ?= 0
fleet-verify: install build
	FLEET_SHARDS=$(FLEET_SHARDS) FLEET_HOME=$(FLEET_HOME) FLEET_PORT_OFFSET=$(FLEET_PORT_OFFSET) \
		FLEET_FRESH=$(FLEET_FRESH) FLEET_DOWN=$(FLEET_DOWN) deploy/local/fleet-verify.sh

fleet-down:
	TRIBUTARY_HOME=$(FLEET_HOME) deploy/local/demo.sh stop
	TRIBUTARY_HOME=$(FLEET_HOME) $(STACK) down

# Ground truth: scatter-gather over the shards compared with the API. Run
# after traffic stopped (make demo ends its traffic before the tour). Every
# live row up to 100,000 per table and shard, 1,000 of them through the API
# one by one and the rest read from ClickHouse in bulk
# (TRIBUTARY_VERIFY_SAMPLE, TRIBUTARY_VERIFY_API_SAMPLE; cmd/verify --help).
# The shards are the fleet file's ($$TRIBUTARY_FLEET from stack.env: the
# stack's fleet.json; FLEET=file checks another fleet). The API's URL is
# the one the demo left in demo/api.env (a TRIBUTARY_SECURE=1 demo adds its
# CA and token), else port 8080 plus the stack's TRIBUTARY_PORT_OFFSET; a
# TRIBUTARY_API_URL given wins over both.
verify:
	api_url=$${TRIBUTARY_API_URL:-}; \
	set -a; . $(TRIBUTARY_HOME)/stack.env; [ ! -f $(TRIBUTARY_HOME)/demo/api.env ] || . $(TRIBUTARY_HOME)/demo/api.env; set +a; \
		export TRIBUTARY_API_URL=$${api_url:-$${TRIBUTARY_API_URL:-http://127.0.0.1:$$((8080 + $${TRIBUTARY_PORT_OFFSET:-0}))}}; \
		export TRIBUTARY_FLEET=$${FLEET:-$$TRIBUTARY_FLEET}; \
		TRIBUTARY_TABLES=deploy/local/tables.json TRIBUTARY_RING_MAP=$$(deploy/local/demo.sh ring-map) \
		$(GO) run ./cmd/verify

# More demo traffic on the running stack, e.g. bulk mode:
#   make loadgen ARGS="--rows-per-op 100 --rate 50 --duration 60s"
loadgen:
	set -a; . $(TRIBUTARY_HOME)/stack.env; set +a; \
		export TRIBUTARY_FLEET=$${FLEET:-$$TRIBUTARY_FLEET}; \
		TRIBUTARY_RING_MAP=$$(deploy/local/demo.sh ring-map) \
		$(GO) run ./cmd/loadgen $(ARGS)

# Benchmarks print numbers; see docs/benchmarks.md for results and machine.
bench-loader:
	set -a; . $(TRIBUTARY_HOME)/stack.env; set +a; \
		$(GO) run ./bench loader --changes $${CHANGES:-1000000} --keys $${KEYS:-200000}

# Side by side with Debezium (embedded engine, Java 17, built with Maven on
# first use); takes /tmp/tributary-bench.lock itself. Not part of make test.
.PHONY: bench-peers
bench-peers:
	bench/peers/run.sh --rows $${ROWS:-500000} --cases $${CASES:-a,b} $${PEERS_FLAGS:-}
