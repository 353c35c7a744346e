GO        ?= go
BIN       := bin/keel
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PROTO_DIR := proto/keelpb
SHELL     := /bin/bash

.PHONY: all build run test test-clients test-kcat test-franz-groups faults faults-data faults-data-unclean lint docs docs-check fuzz proto proto-check bench bench-failover bench-heartbeats bench-partitions bench-snapshot bench-keel bench-table clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/keel

## run: a local cluster on loopback with temporary data (Ctrl-C stops it).
run: build
	./$(BIN) dev

## test: every test, race detector on, integration tests included.
test: build
	$(GO) test -race -count=1 -timeout 20m ./...

## test-clients: Kafka's own clients against real 3-controller, 3-broker clusters:
## kcat and the Python client of python3-confluent-kafka (both librdkafka 2.0):
## metadata, a topic created through the brokers, produce with acks=all and an
## idempotent producer across a kill -9 of the partition's leader, consume, and
## every delivery the client reported read back at its offset; consumer groups
## (kcat -G, subscribe()): partitions split between members, offsets committed; and
## the console in headless Chromium (TestConsole_Browser; screenshots in
## KEEL_SCREENSHOT_DIR when set). Installs Debian's kcat, python3-confluent-kafka
## and chromium with apt-get when absent, and fails (never skips) if one still
## cannot be found. `make test` runs each test where its client is installed, and
## skips it with a message otherwise.
HAVE_PY_KAFKA := { /usr/bin/python3 -c 'import confluent_kafka' || python3 -c 'import confluent_kafka'; } >/dev/null 2>&1
test-clients: build
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="kcat"; \
	$(HAVE_PY_KAFKA) || missing="$$missing python3-confluent-kafka"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (apt-get)"; \
		sudo=$$(test "$$(id -u)" -eq 0 || echo sudo); \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v kcat >/dev/null 2>&1 || { echo "test-clients: kcat not found after apt-get install kcat" >&2; exit 1; }
	@$(HAVE_PY_KAFKA) || { echo "test-clients: python3 cannot import confluent_kafka after apt-get install python3-confluent-kafka" >&2; exit 1; }
	@command -v chromium >/dev/null 2>&1 || { echo "test-clients: chromium not found after apt-get install chromium" >&2; exit 1; }
	KEEL_CLIENTS_REQUIRED=1 $(GO) test -race -count=1 -run '^(TestKcat|TestPythonClient|TestConsole_Browser)' -v -timeout 15m ./integration/

## test-kcat: the former name of test-clients.
test-kcat: test-clients

## test-franz-groups: franz-go's own consumer-group tests (pkg/kgo's TestGroupETL with
## FRANZ_RECORDS records (20000), TestGroupSimple, TestIssue523, TestIssue1034,
## TestConsumeRegex) against a `keel dev` of 3 controllers and 3 brokers on free
## loopback ports, stopped whatever happens (TestFranzGo_GroupTests).
FRANZ_RECORDS ?= 20000
test-franz-groups: build
	KEEL_FRANZ_GROUPS=1 KEEL_FRANZ_RECORDS=$(FRANZ_RECORDS) \
		$(GO) test -race -count=1 -run '^TestFranzGo_GroupTests$$' -v -timeout 15m ./integration/

## faults: the fault-injection suite for longer: FAULT_RUNS runs (10) of FAULT_DURATION
## faults each (30s) on fresh 3-controller, 3-broker clusters; KEEL_FAULT_SEED replays
## a run. `make test` runs it once for 15s.
FAULT_RUNS     ?= 10
FAULT_DURATION ?= 30s
faults: build
	KEEL_FAULT_RUNS=$(FAULT_RUNS) KEEL_FAULT_DURATION=$(FAULT_DURATION) \
		$(GO) test -race -count=1 -run '^TestFaults$$' -v -timeout 60m ./integration/ 2>&1 | \
		tee faults.log | grep -v '^        time='; test $${PIPESTATUS[0]} -eq 0

## faults-data: the data fault suite for longer: FAULT_RUNS runs (10) of FAULT_DURATION
## faults each (30s): idempotent acks=all franz-go producers and consumers on RF-3 topics
## (unclean election off) while controllers and brokers are killed, paused and stopped
## (SIGTERM), partition leaders cut off from the quorum and their followers, broker disks
## filled, brokers losing power, an old metadata snapshot restored, brokers' links to
## the controllers blipping, poison batches produced and strangers flooding a Kafka port;
## every acknowledged record must be read back at its offset.
## KEEL_FAULT_SEED replays a run; KEEL_DATA_FAULTS=kind,... injects only those kinds.
## `make test` runs it once for 20s.
faults-data: build
	KEEL_FAULT_RUNS=$(FAULT_RUNS) KEEL_FAULT_DURATION=$(FAULT_DURATION) \
		$(GO) test -race -count=1 -run '^TestDataFaults$$' -v -timeout 60m ./integration/ 2>&1 | \
		tee faults-data.log | grep -v '^        time='; test $${PIPESTATUS[0]} -eq 0

## faults-data-unclean: the data fault suite's unclean mode: topics with unclean leader
## election on, lagging followers left as the only live replicas; it measures and reports
## the acknowledged records lost instead of failing on them. `make test` runs it once
## for 10s.
faults-data-unclean: build
	KEEL_FAULT_RUNS=$(FAULT_RUNS) KEEL_FAULT_DURATION=$(FAULT_DURATION) \
		$(GO) test -race -count=1 -run '^TestDataFaultsUnclean$$' -v -timeout 60m ./integration/ 2>&1 | \
		tee faults-data-unclean.log | grep -v '^        time='; test $${PIPESTATUS[0]} -eq 0

lint: docs-check
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## docs: regenerate the generated pages under docs/ (docs/configuration.md: every
## flag of every keel command, from the commands themselves: keel docs configuration).
docs:
	$(GO) run ./cmd/keel docs configuration > docs/configuration.md.tmp || { rm -f docs/configuration.md.tmp; exit 1; }
	mv docs/configuration.md.tmp docs/configuration.md

## docs-check: fail if docs/configuration.md differs from what `make docs` would write
## (make lint runs it; TestDocs_ConfigurationUpToDate checks the same in make test).
docs-check:
	@tmp=$$(mktemp) && trap 'rm -f "$$tmp"' EXIT && \
	$(GO) run ./cmd/keel docs configuration > "$$tmp" || exit 1; \
	diff -u docs/configuration.md "$$tmp" || { echo "docs/configuration.md is stale: run make docs" >&2; exit 1; }

## proto: regenerate the Go code from the .proto files (protoc 3.21.12,
## protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.6.0; .ci/run installs them).
proto:
	protoc -I $(PROTO_DIR) --go_out=$(PROTO_DIR) --go_opt=paths=source_relative \
		--go-grpc_out=$(PROTO_DIR) --go-grpc_opt=paths=source_relative \
		$(PROTO_DIR)/*.proto

## proto-check: fail if the committed generated code is stale.
## (The protoc version line in the headers is ignored: a Debian patch release
## of protoc must not fail the check when the code itself is the same.)
proto-check: proto
	git diff --exit-code -I '^//[[:space:]]+protoc[[:space:]]' -- $(PROTO_DIR)
	test -z "$$(git status --porcelain -- $(PROTO_DIR))"

## bench: Go benchmarks of the hot paths (commit throughput through a real 3-node quorum).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s -count 5 ./...

## bench-heartbeats: heartbeat latency at the active controller for growing broker counts.
bench-heartbeats:
	KEEL_BENCH_HEARTBEATS=$${KEEL_BENCH_HEARTBEATS:-100,1000,5000,10000} $(GO) test -count=1 -run TestHeartbeatCapacity -v -timeout 30m ./server/

## bench-partitions: create P partitions over real broker agents, then fence the broker leading the most.
bench-partitions:
	KEEL_BENCH_PARTITIONS=$${KEEL_BENCH_PARTITIONS:-100000} $(GO) test -count=1 -run TestPartitionScale -v -timeout 30m ./server/

## bench-snapshot: 1,000,000 partitions over 100 brokers: heap, snapshot size, save time, load time.
bench-snapshot:
	KEEL_BENCH_SNAPSHOT=$${KEEL_BENCH_SNAPSHOT:-1000000} $(GO) test -count=1 -run TestSnapshotScale -v -timeout 30m ./server/

## fuzz: run each fuzz target for FUZZTIME (30s); make test runs their seeds.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzReadSnapshot$$' -fuzztime $(FUZZTIME) ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzParseVoters$$' -fuzztime $(FUZZTIME) ./raftlog/
	$(GO) test -run '^$$' -fuzz '^FuzzParseAssignment$$' -fuzztime $(FUZZTIME) ./cmd/keel/
	$(GO) test -run '^$$' -fuzz '^FuzzParseReplicas$$' -fuzztime $(FUZZTIME) ./cmd/keel/

## bench-failover: kill -9 the leader of a real 3-controller quorum 10 times.
bench-failover: build
	KEEL_BENCH_FAILOVER=10 $(GO) test -count=1 -run TestBenchFailover -v -timeout 10m ./integration/

## bench-keel: `keel bench` with its defaults: a real 3-controller quorum, 100 simulated
## brokers, 100,000 partitions, every scenario 3 times (`keel bench --help`; the headline
## run is `./bin/keel bench --partitions 1000000`).
bench-keel: build
	./$(BIN) bench

## bench-table: run `keel bench BENCH_ARGS -o json` and print its figures as rows of
## docs/benchmarks.md's table, with today's date and the command
## (cmd/keel/internal/bench/cmd/benchtable; the report is kept in bench.json).
BENCH_ARGS ?=
bench-table: build
	./$(BIN) bench $(BENCH_ARGS) -o json > bench.json
	$(GO) run ./cmd/keel/internal/bench/cmd/benchtable -command 'keel bench $(strip $(BENCH_ARGS))' < bench.json

clean:
	rm -rf bin
