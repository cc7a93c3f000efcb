# The extension's files, built and installed the usual way (PGXS); the Makefile calls this after building
# build/*.sql. `make -f pgxs.mk installcheck` runs the pg_regress tests in test/ against the server PGHOST/PGPORT
# name (tests/test_regress.py does that against a throwaway cluster).
MODULE_big = pgad
OBJS = extension/pgad.o
PGAD_CACHE ?= /var/cache/pgad
PG_CPPFLAGS = -DPGAD_CACHE_DIRECTORY='"$(PGAD_CACHE)"'
MODULEDIR = extension
DATA = extension/pgad.control
DATA_built = $(BUILT)
REGRESS = pgad security
REGRESS_OPTS = --inputdir=test --outputdir=$(or $(REGRESS_OUT),test)
PG_CONFIG ?= pg_config
# No LLVM bitcode for the server's own JIT to inline (building it would need clang on the machine).
override with_llvm = no
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
