# Sluice: `make run` starts a simulated fleet behind Sluice; `make test` checks everything.
GO      ?= go
BIN     := bin
PKGS    := ./...

.PHONY: all build run test test-short lint fmt bench bench-admission bench-batch bench-batch-reserve bench-classes-live bench-faults bench-limits bench-memory bench-overhead bench-policies bench-policies-live validate fidelity fuzz deploy-check clean

all: build

## build: compile bin/sluice, bin/gpuworker and bin/sluice-bench
build:
	$(GO) build -o $(BIN)/ ./cmd/sluice ./cmd/gpuworker ./cmd/sluice-bench

## run: start 4 simulated GPU workers (2 fast H100, 2 slow L4) and Sluice on 127.0.0.1:8080; Ctrl-C stops all
run: build
	./deploy/demo.sh

## test: lint, then every test with the race detector
test: lint
	$(GO) test -race -count=1 $(PKGS)

## test-short: tests without the race detector (quicker while editing)
test-short:
	$(GO) test -count=1 $(PKGS)

## lint: gofmt, go vet and staticcheck must all be clean
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	 if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

## fmt: gofmt every Go file git tracks, in place
fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: Go benchmarks of the hot path (policy picks, parsing, engine)
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

## bench-overhead: cost per request in one run: direct to a worker, a bare Go ReverseProxy, nginx, HAProxy and Sluice (full pipeline), streamed and not, in five interleaved rounds (~5 minutes)
bench-overhead: build
	./deploy/overhead.sh

## bench-faults: a fault on one of four workers under 0.6 load (SCENARIO=kill, slow or error; ~1 minute)
bench-faults: build
	./deploy/faults.sh

## bench-memory: Sluice's RSS with 10,000 open trickling streams, and time to first token added for 200 KB prompts (~1.5 minutes)
bench-memory: build
	./deploy/memory.sh

## bench-limits: what tenant limits cost: no tenants, in-process store and Redis side by side (~1.5 minutes)
bench-limits: build
	./deploy/bench-limits.sh

## bench-batch: what a Batch API batch costs interactive traffic live: alone, with the batch as flex, the same requests as default traffic (~8 minutes per run)
bench-batch: build
	./deploy/bench-batch.sh

## bench-batch-reserve: priority's time to first token beside a running batch, and the batch's time alone, per admission.batch_reserve (~5 minutes)
bench-batch-reserve: build
	./deploy/batch-reserve.sh

## bench-classes-live: 30% priority + 70% flex live, at light load and overload, with and without admission (~5 minutes)
bench-classes-live: build
	./deploy/bench-classes-live.sh

## bench-admission: the admission and service-class targets in simulation, as ratios beside them (a few minutes)
bench-admission: build
	./deploy/bench-admission.sh

## bench-policies: every routing policy and the oracle in simulation, one table per scenario (a few minutes)
bench-policies: build
	./deploy/bench-policies.sh

## bench-policies-live: the same comparison with real gpuworkers behind a real Sluice on loopback (6 to 11 minutes)
bench-policies-live: build
	./deploy/bench-policies-live.sh

## validate: the GPU model against published measurements (GPU-FACTS.md)
validate: build
	$(BIN)/sluice-bench validate

## fidelity: live gpuworkers behind Sluice vs the simulator that shares their engine (checks the driver, HTTP path, router signals and policy, not the GPU model); 2×L4 and 2×H100 with least_request, 2×H100 + 2×L4 with the default policy (~12 minutes)
fidelity: build
	./deploy/fidelity.sh

## fuzz: a short run of each fuzz target (FUZZTIME: a time, or a count of inputs such as 20000x)
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParseInference -fuzztime=$(FUZZTIME) ./router
	$(GO) test -run='^$$' -fuzz=FuzzDecodeSimple -fuzztime=$(FUZZTIME) ./router
	$(GO) test -run='^$$' -fuzz=FuzzValid -fuzztime=$(FUZZTIME) ./router/jsonscan
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./configs
	$(GO) test -run='^$$' -fuzz=FuzzAskUsage -fuzztime=$(FUZZTIME) ./router/usage
	$(GO) test -run='^$$' -fuzz=FuzzStrip -fuzztime=$(FUZZTIME) ./router/measure
	$(GO) test -run='^$$' -fuzz=FuzzJSONScan -fuzztime=$(FUZZTIME) ./router/measure
	$(GO) test -run='^$$' -fuzz=FuzzResponseStream -fuzztime=$(FUZZTIME) ./router/measure
	$(GO) test -run='^$$' -fuzz=FuzzValidate -fuzztime=$(FUZZTIME) ./router/batch

## deploy-check: the Helm chart rendered and decoded strictly into the Kubernetes API types, `sluice validate` on its configs and deploy/compose's, vet, staticcheck and helm lint --strict (deploy/helmcheck is its own module)
deploy-check: build
	cd deploy/helmcheck && SLUICE_BIN=$(CURDIR)/$(BIN)/sluice $(GO) test -count=1 ./...
	sc=$$($(GO) tool -n staticcheck) && cd deploy/helmcheck && $(GO) vet ./... && $$sc ./...
	cd deploy/helmcheck && $(GO) tool helm lint --strict --kube-version 1.37.0 ../helm/sluice

## clean: remove bin/ (the binaries make build writes)
clean:
	rm -rf $(BIN)
