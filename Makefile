# go-nvml's header marks old NVML calls deprecated; the warnings are noise.
export CGO_CFLAGS ?= -Wno-deprecated-declarations
GO ?= go
BIN := bin/mstar

.PHONY: build test race lint run bench gpu-bins fmt clean fuzz

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/mstar

# The README's test command; .ci/run calls it.
test:
	$(GO) vet ./...
	$(GO) test ./...
	$(GO) test -race -short ./arena/... ./bench/sweep/... ./bench/stress/...
	scripts/fuzz.sh 1000x

# The hostile-input fuzz targets, each for FUZZTIME.
FUZZTIME ?= 60s
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# goimports is run at the version pinned here (fetched by go run, cached).
GOIMPORTS ?= $(GO) run golang.org/x/tools/cmd/goimports@v0.52.0

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@out=$$($(GOIMPORTS) -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "goimports would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The main job on the default backend (the GPU when one works, else the CPU).
run: build
	$(BIN) bench moe --model qwen3-30b-a3b --batch 1,16 --out results.json

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

# Binaries for the GPU machine (there is no Go there): mstar and the GPU tests.
gpu-bins: build
	$(GO) test -c -o bin/gpu.test ./internal/gpu
	$(GO) test -c -o bin/cuda.test ./internal/gpu/cuda
	$(GO) test -c -o bin/moe.test ./kernels/moe
	$(GO) test -c -o bin/bench.test ./bench
	$(GO) test -c -o bin/ceilings.test ./bench/ceilings
	$(GO) test -c -o bin/ablate.test ./bench/ablate
	$(GO) test -c -o bin/p2p.test ./bench/p2p

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin results.json
