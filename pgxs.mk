# The extension's files, installed the usual way (PGXS); the Makefile calls this after building build/*.sql.
MODULEDIR = extension
DATA = extension/pgad.control
DATA_built = $(wildcard build/*.sql)
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
