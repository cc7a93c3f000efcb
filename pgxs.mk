# The extension's files, built and installed the usual way (PGXS); the Makefile calls this after building
# build/*.sql. `make -f pgxs.mk installcheck` runs the pg_regress tests in test/ against the server PGHOST/PGPORT
# name (tests/test_regress.py does that against a throwaway cluster).
# pgad.so is built from one C file per job, extension/*.c, and the header they share, extension/pgad.h, which lists
# them.
MODULE_big = pgad
OBJS = extension/module.o extension/call.o extension/pack.o extension/element.o extension/aggregates.o \
	extension/load.o extension/keys.o extension/reads.o
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
# Each object is rebuilt when the header changes (PGXS tracks headers only where the server was built with
# --enable-depend).
$(OBJS): extension/pgad.h
