/*
 * module.c: the module itself (PG_MODULE_MAGIC, _PG_init), pgad's settings, and two of the doors from pgad's Python
 * back into the server (pgad_check_interrupts, pgad_setting). pgad.h lists the other files, one job each.
 *
 * pgad's settings (_PG_init). Defining them here, rather than leaving them as placeholders anyone may SET, lets them be
 * PGC_SUSET: only a superuser changes them, in postgresql.conf, ALTER SYSTEM, ALTER ROLE/DATABASE or SET. All are the
 * DBA's — the limits, pgad.max_threads, and pgad.load_chunk_rows, whose small values multiply what a load costs beside
 * its rows (each chunk is a group) — but pgad.threads, which any role may lower or raise up to pgad.max_threads. The
 * Python package reads them per call (pgad/server.py).
 *
 * _PG_init also sets up what the other files hook into the server: load.c's and reads.c's (pgad_load_init,
 * pgad_reads_init).
 */
#include "postgres.h"

#include <limits.h>
#include <unistd.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "pgad.h"

PG_MODULE_MAGIC;

#ifndef PGAD_CACHE_DIRECTORY
#define PGAD_CACHE_DIRECTORY "/var/cache/pgad"
#endif

static int	max_lambda_bytes = 1024 * 1024;
static int	max_lambda_nodes = 100000;
static char *cache_directory = NULL;
static int	cache_size_kb = 256 * 1024;
static int	load_chunk_rows = 0;
int			pgad_memory_limit_kb = 1024 * 1024;
static int	threads = 0;
static int	max_threads = 1;
static int	keep_versions = 10;
static int	publish_data_values = 0;

/*
 * pgad.publish_data_values: what pgad.train does where a model's functions' bodies would hold values of data that
 * PUBLIC may not read (pgad/models/publish.py). Its names as pgad/models/publish.py reads them (SHOW's text).
 */
static const struct config_enum_entry publish_data_values_options[] = {
	{"warn", 0, false},
	{"on", 1, false},
	{"off", 2, false},
	{"true", 1, true},
	{"false", 2, true},
	{"yes", 1, true},
	{"no", 2, true},
	{NULL, 0, false}
};

static int	llvm_target = 0;

/* The CPUs the llvm backend compiles for (pgad/jit/targets.py's NAMES): this one, or a level of the x86-64 psABI */
static const struct config_enum_entry llvm_target_options[] = {
	{"host", 0, false},
	{"x86-64", 1, false},
	{"x86-64-v2", 2, false},
	{"x86-64-v3", 3, false},
	{"x86-64-v4", 4, false},
	{NULL, 0, false}
};

/* The most threads one call may use (pgad/jit/threads.py's MAX_THREADS) */
#define PGAD_MAX_THREADS 64

void		_PG_init(void);

/*
 * pgad.memory_limit's default: a quarter of the machine's physical memory (1 GB where the system does not say),
 * within the setting's range.
 */
static int
default_memory_limit_kb(void)
{
	long		pages = sysconf(_SC_PHYS_PAGES);
	long		page_size = sysconf(_SC_PAGESIZE);
	int64		kb;

	if (pages <= 0 || page_size <= 0)
		return 1024 * 1024;
	kb = (int64) pages * page_size / 4 / 1024;
	return (int) Min(Max(kb, 1024), INT_MAX);
}

/* pgad.max_threads' default: the cores online, at most PGAD_MAX_THREADS. */
static int
default_max_threads(void)
{
	long		cores = sysconf(_SC_NPROCESSORS_ONLN);

	return (int) Min(Max(cores, 1), PGAD_MAX_THREADS);
}

void
_PG_init(void)
{
	DefineCustomIntVariable("pgad.max_lambda_bytes",
							"The longest lambda text pgad accepts.",
							"Longer lambdas are refused before parsing, with SQLSTATE 54001.",
							&max_lambda_bytes, 1024 * 1024, 64, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("pgad.max_lambda_nodes",
							"The most expression nodes a lambda and its derivatives may have.",
							"Parsing or differentiating past it stops with SQLSTATE 54001.",
							&max_lambda_nodes, 100000, 16, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("pgad.cache_directory",
							   "Where compiled kernels are kept between connections; empty for no disk cache.",
							   "Used only when owned by the server's OS user and not writable by group or others.",
							   &cache_directory, PGAD_CACHE_DIRECTORY,
							   PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("pgad.cache_size",
							"The most disk space compiled kernels may take; the least recently used go first.",
							NULL,
							&cache_size_kb, 256 * 1024, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("pgad.load_chunk_rows",
							"Rows per chunk when loading data through pgad.pack; 0 loads it natively, whole.",
							NULL,
							&load_chunk_rows, 0, 0, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);
	pgad_memory_limit_kb = default_memory_limit_kb();
	DefineCustomIntVariable("pgad.memory_limit",
							"The most memory one pgad call may take for its data; by default a quarter of the "
							"machine's physical memory.",
							"Data that would need more stops while it is packed, with SQLSTATE 53200.",
							&pgad_memory_limit_kb, pgad_memory_limit_kb, 1024, INT_MAX,
							PGC_SUSET, GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("pgad.threads",
							"Threads a pgad kernel call splits its rows over; 0 is max_parallel_workers_per_gather + 1, "
							"at most the cores.",
							"Never more than pgad.max_threads; calls with few rows run on one.",
							&threads, 0, 0, PGAD_MAX_THREADS,
							PGC_USERSET, 0, NULL, NULL, NULL);
	max_threads = default_max_threads();
	DefineCustomIntVariable("pgad.max_threads",
							"The most threads one pgad kernel call may use; by default the cores online.",
							NULL,
							&max_threads, max_threads, 1, PGAD_MAX_THREADS,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("pgad.keep_versions",
							"The versions of a model pgad.train keeps besides the deployed one; older ones are dropped.",
							"A version whose functions other objects use is kept.",
							&keep_versions, 10, 1, 100000,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("pgad.publish_data_values",
							 "Whether pgad.train writes values of data PUBLIC may not read into a model's function "
							 "bodies: warn, on or off.",
							 "The bodies are in pg_proc, which every role that may connect reads; off refuses such a "
							 "training with SQLSTATE 42501.",
							 &publish_data_values, 0, publish_data_values_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("pgad.llvm_target",
							 "The CPU the llvm backend compiles kernels for: host, or a level of x86-64.",
							 "A level needs its features of this CPU; one it lacks is refused with SQLSTATE 22023.",
							 &llvm_target, 0, llvm_target_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("pgad");
	pgad_load_init();
	pgad_reads_init();
}

/*
 * Three doors from pgad's Python back into the server that run no query, so that they work in parallel mode, where
 * PL/Python runs none (each plpy.execute is a subtransaction, which parallel mode forbids): the aggregates' transition
 * function runs in parallel workers, and their final function in a leader that is in parallel mode. pgad/server.py
 * calls them with ctypes, by name among the backend's symbols (PostgreSQL loads pgad.so with RTLD_GLOBAL), never from a
 * file. Two are here; the third, pgad_error_query, is call.c's, with the error path it serves.
 */

/*
 * CHECK_FOR_INTERRUPTS, with the error it raises (a cancel, a statement_timeout) caught and handed back rather than
 * thrown across Python's frames: its SQLSTATE (5 characters) and its message (at most size bytes, with the NUL)
 * into the caller's buffers, and 1; 0 when nothing is pending. Python then raises the same error, which aborts the
 * transaction as the original would have. A termination (FATAL) exits the backend here, as it would anywhere.
 */
int
pgad_check_interrupts(char *sqlstate, char *message, int size)
{
	MemoryContext context = CurrentMemoryContext;
	volatile int interrupted = 0;

	if (!INTERRUPTS_PENDING_CONDITION())
		return 0;
	PG_TRY();
	{
		CHECK_FOR_INTERRUPTS();
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(context);
		error = CopyErrorData();
		FlushErrorState();
		strlcpy(sqlstate, unpack_sql_state(error->sqlerrcode), 6);
		strlcpy(message, error->message != NULL ? error->message : "", size);
		FreeErrorData(error);
		interrupted = 1;
	}
	PG_END_TRY();
	return interrupted;
}

/* A setting as SHOW shows it (palloc'd in the current memory context), or NULL when there is none of that name. */
char *
pgad_setting(const char *name)
{
	return GetConfigOptionByName(name, NULL, true);
}
