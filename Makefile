# pgad — `make install` (as root: installs what is missing), `make demo`, `make test`, `make bench`.
# `make install CUDA=1` adds the cuda backend (numba-cuda and the CUDA libraries); `make test` and `make bench` do.
#
# The extension's files (the SQL scripts and the C library pgad.so, one C file per job in extension/, pgad.h listing
# them) build and install through PGXS; the Python package pgad and its dependencies go into a virtual environment
# built from the Python that plpython3u embeds, at $(PGAD_HOME)/venv. The tests, the demo and the benchmarks run from a
# second environment, .venv, with the client-side tools (psycopg, pytest, testing.postgresql).

PG_CONFIG ?= $(shell command -v pg_config 2>/dev/null || echo pg_config)
PGAD_HOME ?= /usr/local/lib/pgad
PGAD_CACHE ?= /var/cache/pgad
VENV := $(PGAD_HOME)/venv
DEV := .venv
# One source of the current install script, extension/sql/pgad.sql, built as pgad--<default_version>.sql (as
# pgvector's Makefile does); beside it pgad--0.1.0.sql, the first version, and the upgrade scripts from it, the path by
# which PostgreSQL installs any older version (CREATE EXTENSION pgad VERSION '0.9.0': tests/test_upgrade.py).
VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" extension/pgad.control)
SQL := extension/sql/pgad--0.1.0.sql $(wildcard extension/sql/pgad--*--*.sql)
BUILT := build/pgad--$(VERSION).sql $(patsubst extension/sql/%,build/%,$(SQL))

.PHONY: FORCE all install demo test bench fuzz mutation installcheck clean server-packages python-env extension-files

all: install

# --- install -------------------------------------------------------------------------------------------------------
install: server-packages
	@$(MAKE) --no-print-directory python-env extension-files CUDA=$(CUDA)

# The PostgreSQL server, PL/Python and the server headers, from the system's packages when they are missing.
server-packages:
	@bash tools/install-server-packages.sh "$(PG_CONFIG)"

# The Python that plpython3u embeds (libpython3.X in plpython3.so) builds the server's environment.
PLPYTHON = $(shell ldd "$$($(PG_CONFIG) --pkglibdir)/plpython3.so" 2>/dev/null | grep -o 'libpython3\.[0-9]*' | head -1 | sed 's/^lib//')

python-env:
	@test -n "$(PLPYTHON)" || { echo "pgad: no plpython3.so under $$($(PG_CONFIG) --pkglibdir)"; exit 1; }
	@test -x $(VENV)/bin/python || $(PLPYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check '.$(if $(CUDA),[cuda])'
	@install -d -m 700 -o postgres -g postgres $(PGAD_CACHE) 2>/dev/null || mkdir -p $(PGAD_CACHE)

SITE_PACKAGES = $$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# Built every time (a sed each): the path written in depends on PGAD_HOME, which no file's date says.
build/pgad--$(VERSION).sql: extension/sql/pgad.sql extension/pgad.control FORCE
	@mkdir -p build
	sed "s|@PGAD_SITE_PACKAGES@|$(SITE_PACKAGES)|" $< > $@

build/%.sql: extension/sql/%.sql FORCE
	@mkdir -p build
	sed "s|@PGAD_SITE_PACKAGES@|$(SITE_PACKAGES)|" $< > $@

# The extension's scripts are replaced as a whole: a script that is no longer built (an older version's full
# script) is removed from the build and from the server's extension directory.
extension-files: $(BUILT)
	@rm -f $(filter-out $(BUILT),$(wildcard build/*.sql))
	@rm -f "$$($(PG_CONFIG) --sharedir)"/extension/pgad--*.sql
	@$(MAKE) --no-print-directory -f pgxs.mk install PG_CONFIG="$(PG_CONFIG)" PGAD_CACHE="$(PGAD_CACHE)" \
		BUILT="$(BUILT)"

# --- the client side: demo, tests, benchmarks --------------------------------------------------------------------
$(DEV)/.done: pyproject.toml
	@test -x $(DEV)/bin/python || $(PLPYTHON) -m venv $(DEV)
	$(DEV)/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

# The tests run the cuda backend on numba's CUDA simulator (no GPU needed), in the server too.
test bench: CUDA = 1

demo: install $(DEV)/.done
	$(DEV)/bin/python examples/demo.py

# Then the equality tests — llvm against python and cuda, the optimizers, thread counts, sequences in scans and lanes
# — again for each llvm target of TARGETS (pgad.llvm_target, PGAD_LLVM_TARGET: pgad/jit/targets.py), x86-64's SSE2 (2
# doubles a vector, no libmvec), x86-64-v3's AVX2 (4) and x86-64-v4's AVX-512 (8), the first run's being the host's:
# a claim that holds at one vector width only fails here. A target this CPU cannot run is skipped whole, the reason in
# pytest's header (tests/conftest.py).
# What in those files no llvm target changes is left to the first run: numba's PTX of every cuda kernel (2 minutes),
# the servers started without a GPU.
TARGETS := x86-64-v4 x86-64-v3 x86-64
NOT_PER_TARGET := not sm_80 and not spills and not without_a_gpu
EQUALITY_TESTS := tests/test_jit.py tests/test_gpu.py tests/test_optimizers.py tests/test_threads.py \
	tests/test_sequence_llvm.py tests/test_sequence_lanes.py tests/test_vectors.py tests/test_hessian.py \
	tests/test_scatter.py tests/test_cg.py

test: install $(DEV)/.done
	$(DEV)/bin/python -m pytest $(PYTEST_ARGS)
	@set -e; for target in $(TARGETS); do \
		echo "pgad: the equality tests for the llvm target $$target"; \
		PGAD_LLVM_TARGET=$$target $(DEV)/bin/python -m pytest -q $(EQUALITY_TESTS) -k "$(NOT_PER_TARGET)"; \
	done

# bench/optimum.py: time to the optimum with pgad.train's defaults against export + statsmodels and scikit-learn on
# 1M raw-unit rows (about 2 minutes); OPTIMUM_ARGS='--baseline /opt/pg-bench-old' adds another pgad, installed
# there by tools/baseline.sh (0.13.0 by default), timed beside this tree's. make bench runs each contender once
# (--repeats 1, as run.py does for what takes over a second); docs/performance.md's figures are the best of 3.
# bench/sequences.py --auto: 'auto' against statsforecast's AutoETS on 10,000 daily series (AutoARIMA on 200),
# held-out MASE and coverage (about 26 minutes on 2 cores); AUTO_ARGS='--auto-series 1000' for a shorter run.
# bench/mixed.py: 'auto' against AutoETS on 86 series of mixed kinds, statsmodels' real series among them.
# bench/newcomer.py: pgad.train(name, 'softmax', …) on wine and digits against scikit-learn, pgad.predict against the
# scoring functions (issue 47).
# bench/recommend.py: a factorisation with biases by pgad.train against numpy's ALS, PyTorch's sparse embeddings,
# scikit-surprise and implicit (docs/performance.md, "Weights at scale", issue 48); RECOMMEND_SCALE_ARGS its run at
# scale, by default the issue's 20M ratings of 1M users × 100,000 items at rank 32 (hours on 2 cores, PyTorch's the
# most of them; docs/performance.md has it without PyTorch, and a tenth of it with,
# RECOMMEND_SCALE_ARGS='--users 100000 --items 10000 --ratings 2000000').
# bench/latency.py: a new session's first pgad call (connect, one statement, disconnect) against SELECT 1's
# (docs/performance.md, "The first call").
RECOMMEND_SCALE_ARGS ?= --users 1000000 --items 100000 --ratings 20000000
bench: install $(DEV)/.done
	$(DEV)/bin/python bench/run.py $(BENCH_ARGS)
	$(DEV)/bin/python bench/load.py
	$(DEV)/bin/python bench/cores.py
	$(DEV)/bin/python bench/models.py
	$(DEV)/bin/python bench/optimum.py --repeats 1 $(OPTIMUM_ARGS)
	$(DEV)/bin/python bench/multiclass.py --repeats 1
	$(DEV)/bin/python bench/newcomer.py --repeats 3
	$(DEV)/bin/python bench/recommend.py
	$(DEV)/bin/python bench/recommend.py --rank 32 --backends auto --sweeps 30 --peers torch surprise implicit \
		$(RECOMMEND_SCALE_ARGS)
	$(DEV)/bin/python bench/sequences.py --gradient --train --auto $(AUTO_ARGS)
	$(DEV)/bin/python bench/mixed.py
	$(DEV)/bin/python bench/scan_linear.py
	$(DEV)/bin/python bench/shards.py
	$(DEV)/bin/python bench/mlp.py
	$(DEV)/bin/python bench/sizes.py
	$(DEV)/bin/python bench/latency.py --json bench/results/latency.json

# The lambda-language fuzzer: a million generated and mutated lambdas through the parser, both modes and the python
# backend on every core, a sample against PostgreSQL and through pgad's SQL (bench/fuzz.py; FUZZ_ARGS: --inputs,
# --seed, --jobs, --sql), then the crash fuzzer of vector lambdas (--vectors, --vector-sql). docs/testing.md, "Fuzzing".
fuzz: install $(DEV)/.done
	$(DEV)/bin/python bench/fuzz.py $(FUZZ_ARGS)

# Mutation testing with mutmut over the in-process tests (no server; not in CI): tools/mutation.sh, whose header
# lists its settings (MUTATION_JOBS, MUTATION_FRESH, MUTMUT_ARGS, RULES_ARGS); mutmut's own in pyproject.toml.
# MUTATION_SCOPE=models: the model code, with the SQL tests against a server that imports the mutants
# (tools/mutation-models.toml).
mutation: install $(DEV)/.done
	$(DEV)/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,mutation]'
	DEV=$(DEV) bash tools/mutation.sh

# The pg_regress tests in test/ against the server PGHOST/PGPORT name (make test runs them on a throwaway cluster).
installcheck:
	@$(MAKE) --no-print-directory -f pgxs.mk installcheck PG_CONFIG="$(PG_CONFIG)"

clean:
	rm -rf build
	@$(MAKE) --no-print-directory -f pgxs.mk clean PG_CONFIG="$(PG_CONFIG)"
