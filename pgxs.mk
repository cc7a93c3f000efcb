# The extension's files, installed the usual way (PGXS); the Makefile calls this after building build/*.sql.
# `make -f pgxs.mk installcheck` runs the pg_regress tests in test/ against the server PGHOST/PGPORT name
# (tests/test_regress.py does that against a throwaway cluster).
MODULEDIR = extension
DATA = extension/pgad.control
DATA_built = $(wildcard build/*.sql)
REGRESS = pgad
REGRESS_OPTS = --inputdir=test --outputdir=$(or $(REGRESS_OUT),test)
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
