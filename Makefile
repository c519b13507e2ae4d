# Every target sets up .venv itself, so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# The trainer image's torch: cpu (PyTorch's CPU wheel index), gpu (the CUDA build from PyPI), or auto:
# cpu where that index answers, else gpu.
VARIANT ?= auto

# Test workers for `make test`: one per core by default; TEST_JOBS=1 runs the suite in one process.
TEST_JOBS ?= auto
# Test workers for `make e2e`, each taking whole files and holding one cluster at a time: two clusters
# side by side fit a 2-core machine, as the suite mostly waits on its controllers; fewer run where
# the disk cannot hold that many clusters' images (tests/support/e2e_workers.py says so).
E2E_JOBS ?= 2

.PHONY: venv test test-slow e2e e2e-binaries e2e-image lint golden docs demo bench image clean dist version

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@echo "installing the project and its tools into $(VENV) (torch takes a few minutes the first time)"
	$(PY) -m pip install --progress-bar off -c constraints.txt -e '.[generator,cluster,trainer,test]'
	rm -f $(VENV)/.installed-*
	touch $@

# Every test but the end-to-end suite and the stress tier, side by side, each file on one worker (so
# a module's fixtures run once); the 10 slowest are listed at the end.
test: venv
	$(PY) -m pytest -q -m "not e2e and not slow" -n $(TEST_JOBS) --dist loadfile --durations=10

# The slow tier, in one process because the CPU hog is the point: replicas killed under a CPU hog, the
# trainer's teardowns repeated until an abort would show, the README's --compile trainer line, and the
# longest real runs (the README's examples as written, the local runner's killed replicas), which keep
# `make test` within 5 minutes by running here.
test-slow: venv
	$(PY) -m pytest -q -m "slow and not e2e" --durations=10

# The end-to-end suite on a real control plane. A machine's first run builds the control plane from
# Go modules and the trainer's image side by side (the Go builds keep the CPUs busy while the image
# build mostly downloads torch), then fills the local registry; later runs find both built. The modules
# marked `alone` (three nodes' copies of the trainer's image) run after the rest, in one process: side
# by side with another cluster they starved its jobs of disk and CPU; both runs' failures count.
e2e: venv $(VENV)/kubeflow-sdk/bin/python $(VENV)/kubeflow-sdk-v2/bin/python
	$(MAKE) --no-print-directory -j2 e2e-binaries e2e-image
	$(PY) -m generator image registry up --quiet
	workers=$$($(PY) -m tests.support.e2e_workers $(E2E_JOBS)) && \
	KUBEFLOW_SDK_PYTHON=$(VENV)/kubeflow-sdk/bin/python KUBEFLOW_SDK_V2_PYTHON=$(VENV)/kubeflow-sdk-v2/bin/python \
		$(PY) -m pytest -q -m "e2e and not alone" tests/e2e tests/charts -n $$workers --dist loadfile --durations=10; \
	first=$$?; $(PY) -m pytest -q -m "e2e and alone" tests/e2e --durations=10 && exit $$first

# The two builds side by side, each line as it comes (make's --output-sync would hold a recipe's
# output until it ends: 50 silent minutes on a first run), marked with its build's name; each build
# says when it starts and how long it took. Unbuffered, so each step's line shows as it starts. The
# node's parts (kubelet, containerd, CoreDNS, the sandbox image) come after the control plane's.
BUILD_BINARIES ?= PYTHONUNBUFFERED=1 $(PY) -m generator cluster build
BUILD_IMAGE ?= PYTHONUNBUFFERED=1 $(PY) -m generator image build --steps
e2e-binaries e2e-image: SHELL := /bin/bash
labelled = start=$$(date +%s); echo "[$(1)] started at $$(date +%H:%M:%S)"; \
	{ $(2); } 2>&1 | while IFS= read -r line; do printf '[%s] %s\n' '$(1)' "$$line"; done; \
	code=$${PIPESTATUS[0]}; took=$$(( $$(date +%s) - start )); \
	printf '[%s] %s after %dm%02ds\n' '$(1)' "$$([ $$code = 0 ] && echo done || echo "FAILED (exit $$code)")" \
		$$((took / 60)) $$((took % 60)); exit $$code

e2e-binaries: venv
	@$(call labelled,control plane,$(BUILD_BINARIES))

e2e-image: venv
	@$(call labelled,trainer image,$(BUILD_IMAGE))

# The official Kubeflow training SDK, for tests/e2e/test_kubeflow_sdk.py, in a venv of its own:
# kubeflow-training 1.9.4 caps the kubernetes client below 36, and the generator's server-side
# apply needs a newer one.
$(VENV)/kubeflow-sdk/bin/python:
	$(PYTHON) -m venv $(VENV)/kubeflow-sdk
	$(VENV)/kubeflow-sdk/bin/pip install --quiet kubeflow-training==1.9.4

# The Kubeflow SDK for Trainer v2 (`kubeflow` 0.5, its TrainerClient), for tests/e2e/test_kubeflow_sdk_v2.py,
# in a venv of its own for the same reason: it too caps the kubernetes client below 36. A failed
# install leaves no venv behind, so the next `make e2e` tries again.
$(VENV)/kubeflow-sdk-v2/bin/python:
	rm -rf $(VENV)/kubeflow-sdk-v2
	$(PYTHON) -m venv $(VENV)/kubeflow-sdk-v2
	$(VENV)/kubeflow-sdk-v2/bin/pip install --quiet kubeflow==0.5.0 || { rm -rf $(VENV)/kubeflow-sdk-v2; exit 1; }

# The one chart-linting entry point: helm lint, schema checks, Kubernetes schema
# validation of every scenario, and a security scan of the operator chart.
lint: venv $(VENV)/checkov/bin/checkov
	CHECKOV=$(VENV)/checkov/bin/checkov $(PY) -m tests.support.lint

# checkov pins old versions of packages pytest needs, so it lives in a venv of its own.
$(VENV)/checkov/bin/checkov:
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install --quiet 'checkov>=3.2'

# Refresh the golden snapshots after a deliberate template change; review the diff.
golden: venv
	$(PY) -m tests.support.golden

# The release's artifacts in dist/: the sdist, the wheel built from it, and both charts packaged by the helm CLI
# (built into the cache once, as `generator cluster build` builds it). One version for all: make version V=X.Y.Z.
dist: venv
	rm -rf dist
	$(PY) -m tests.support.release dist dist

version: venv
	$(PY) -m tests.support.release version $(V)

# Regenerate the charts' README parameter tables from their values.yaml.
docs: venv
	$(PY) -m tests.support.chartdoc charts/pytorchjob charts/pytorch-operator

demo: venv
	$(PY) -m generator values --name demo --workers 2 --cpu 500m --memory 1Gi --output-size 1Gi \
		--arg=--dataset=digits --arg=--epochs=8 --arg=--threads=1 -o runs/demo-values.yaml
	@echo "--- runs/demo-values.yaml"; cat runs/demo-values.yaml
	$(PY) -m generator render runs/demo-values.yaml --release demo -o runs/demo-manifests.yaml
	@echo "--- rendered to runs/demo-manifests.yaml"
	rm -rf runs/demo
	$(PY) -m generator run runs/demo-values.yaml --release demo

bench: venv $(VENV)/torchx/bin/torchx
	PATH="$(CURDIR)/$(VENV)/torchx/bin:$$PATH" $(PY) -m tests.support.bench_generator
	$(PY) -m tests.support.bench_trainer
	$(PY) -m tests.support.bench_cluster
	$(PY) -m tests.support.bench_nodeloss
	$(PY) -m tests.support.bench_nodeloss --defaults --out bench-nodeloss-defaults.json

# torchx, for the generator benchmark's comparison, in a venv of its own.
$(VENV)/torchx/bin/torchx:
	$(PYTHON) -m venv $(VENV)/torchx
	$(VENV)/torchx/bin/pip install --quiet torchx kubernetes

# The trainer's image, named as the job chart names it (<version>, or <version>-cuda for the CUDA
# build): with Docker where its engine answers, else podman; built once per machine, then reused
# until trainer/Dockerfile or what it copies changes.
image: venv
	$(PY) -m generator image build --variant $(VARIANT)

clean:
	rm -rf $(VENV) runs build dist *.egg-info .pytest_cache .hypothesis
