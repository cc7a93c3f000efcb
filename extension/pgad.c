/*
 * pgad.c: the native part of pgad, loaded into every backend that calls a pgad function.
 *
 * Three small jobs that Python cannot do from inside PL/Python, or not fast enough:
 *
 * 1. pgad's settings (_PG_init). Defining them here, rather than leaving them as placeholders anyone may SET,
 *    lets them be PGC_SUSET: only a superuser changes them, in postgresql.conf, ALTER SYSTEM, ALTER ROLE/DATABASE
 *    or SET. All are the DBA's — the limits, pgad.max_threads, and pgad.load_chunk_rows, whose small values
 *    multiply what a load costs beside its rows (each chunk is a group) — but pgad.threads, which any role may
 *    lower or raise up to pgad.max_threads. The Python package reads them per call (pgad/server.py).
 *
 * 2. The door from SQL into Python (pgad_call). Every public function pgad.f is a C function that calls its
 *    PL/Python implementation pgad._f, found by name and argument types in pgad's own schema, never through the
 *    caller's search_path. A call made from C is not subject to the EXECUTE check, so the implementations are
 *    not executable by PUBLIC while the public functions keep running as the caller (SECURITY INVOKER), with
 *    the caller's privileges on the data. An error the implementation raises on purpose (plpy.Error, or a
 *    server error passed through, a cancel among them) leaves as the server's own: PL/Python's
 *    "plpy.Error: " prefix and the Python traceback dropped, the SQLSTATE, DETAIL and HINT kept. Any other
 *    Python exception, a bug, keeps its traceback. An error that points into the lambda (a syntax error) also
 *    carries the lambda as its internal query and the place as its position, which psql shows as PostgreSQL's
 *    own syntax errors, a caret under the place: plpy.error cannot set them, so pgad's Python leaves them here
 *    first (pgad_error_query, part 5).
 *
 * 3. The packing aggregate pgad.pack (below), which turns rows into numpy's columns at about the cost of a scan:
 *    a PL/Python transition function would cost a microsecond a row; and pgad._element, which its queries read an
 *    array column's elements with, checking every array against the length the lambda reads.
 *
 * Further down: the aggregates pgad.loss_agg, gradient_agg and gradient_descent_agg (4), the doors from pgad's
 * Python back into the server (5), the native load (6), which runs the functions' data query into one native
 * array per column that numpy wraps without a copy (pgad.pack remains for group_by and chunked loads), and the
 * relations a training read (7), which its model's read_from records, as PostgreSQL's executor checks them.
 */
#include "postgres.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

PG_MODULE_MAGIC;

#ifndef PGAD_CACHE_DIRECTORY
#define PGAD_CACHE_DIRECTORY "/var/cache/pgad"
#endif

static int	max_lambda_bytes = 1024 * 1024;
static int	max_lambda_nodes = 100000;
static char *cache_directory = NULL;
static int	cache_size_kb = 256 * 1024;
static int	load_chunk_rows = 0;
static int	memory_limit_kb = 1024 * 1024;
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
static void load_xact_callback(XactEvent event, void *arg);
static bool reads_checked(List *range_table, bool ereport_on_violation);
static void reads_xact_callback(XactEvent event, void *arg);
static ExecutorCheckPerms_hook_type next_check_perms = NULL;

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
	memory_limit_kb = default_memory_limit_kb();
	DefineCustomIntVariable("pgad.memory_limit",
							"The most memory one pgad call may take for its data; by default a quarter of the "
							"machine's physical memory.",
							"Data that would need more stops while it is packed, with SQLSTATE 53200.",
							&memory_limit_kb, memory_limit_kb, 1024, INT_MAX,
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
	RegisterXactCallback(load_xact_callback, NULL);
	next_check_perms = ExecutorCheckPerms_hook;
	ExecutorCheckPerms_hook = reads_checked;
	RegisterXactCallback(reads_xact_callback, NULL);
}

/* The oid of function name(argtypes) in schema namespace: pgad's own functions, never found on a search_path. */
static Oid
pgad_function(const char *name, const oidvector *argtypes, Oid namespace)
{
	Oid			fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum(name),
									 PointerGetDatum(argtypes), ObjectIdGetDatum(namespace));

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("pgad's implementation function \"%s\" does not exist", name),
				 errhint("The extension's objects were changed by hand: DROP EXTENSION pgad and CREATE it again.")));
	return fn;
}

/*
 * The oid of the implementation of function fn, in fn's schema: fn's name with prefix added in front and suffix
 * taken off its end, and the argument types argtypes, or fn's own when NULL.
 */
static Oid
implementation_of(Oid fn, const char *prefix, const char *suffix, const oidvector *argtypes)
{
	HeapTuple	tuple;
	Form_pg_proc proc;
	char		name[NAMEDATALEN];
	Oid			implementation;
	int			length;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	length = strlen(NameStr(proc->proname)) - strlen(suffix);
	if (length < 0 || strcmp(NameStr(proc->proname) + length, suffix) != 0)
		elog(ERROR, "function %s does not end in %s", NameStr(proc->proname), suffix);
	snprintf(name, sizeof(name), "%s%.*s", prefix, length, NameStr(proc->proname));
	implementation = pgad_function(name, argtypes != NULL ? argtypes : &proc->proargtypes, proc->pronamespace);
	ReleaseSysCache(tuple);
	return implementation;
}

/*
 * The internal query (the lambda's text, in TopMemoryContext) and the position in it (1-based, in characters) of
 * the error that pgad's Python is about to raise, left by pgad_error_query; NULL and 0 when there is none.
 */
static char *pending_query = NULL;
static int	pending_position = 0;

static void
forget_pending_query(void)
{
	if (pending_query != NULL)
		pfree(pending_query);
	pending_query = NULL;
	pending_position = 0;
}

/*
 * Re-throws the error being handled, as the server's own where pgad raised it on purpose: PL/Python writes it as
 * "plpy.Error: message" or "spiexceptions.QueryCanceled: message", with the Python traceback as its CONTEXT. An
 * error pgad raised (plpy.Error) takes the pending internal query and position, if any.
 */
static void
rethrow_plainly(MemoryContext context)
{
	ErrorData  *error;
	const char *colon;

	MemoryContextSwitchTo(context);
	error = CopyErrorData();
	FlushErrorState();
	if (error->message != NULL &&
		(strncmp(error->message, "plpy.", 5) == 0 || strncmp(error->message, "spiexceptions.", 14) == 0) &&
		(colon = strstr(error->message, ": ")) != NULL)
	{
		bool		pgads = strncmp(error->message, "plpy.", 5) == 0;

		error->message = pstrdup(colon + 2);
		error->context = NULL;
		error->internalquery = pgads && pending_query != NULL ? pstrdup(pending_query) : NULL;
		error->internalpos = pgads && pending_query != NULL ? pending_position : 0;
	}
	forget_pending_query();
	ReThrowError(error);
}

/* FunctionCallInvoke(call), with an error pgad raised on purpose re-thrown plainly. */
static Datum
call_plainly(FunctionCallInfo call)
{
	MemoryContext context = CurrentMemoryContext;
	Datum		result = (Datum) 0;

	forget_pending_query();		/* one left by a call that raised no error never reaches another's */
	PG_TRY();
	{
		result = FunctionCallInvoke(call);
	}
	PG_CATCH();
	{
		rethrow_plainly(context);
	}
	PG_END_TRY();
	return result;
}

PG_FUNCTION_INFO_V1(pgad_call);

/*
 * What pgad_call keeps of a function between calls: its implementation, and which arguments pgad.f declares
 * anycompatible or "any" (one that takes a number or a text, as pgad.train's validation, or a boolean or a text,
 * as its deploy: "any", since anycompatible would make both of one type): PL/Python takes no polymorphic type, so
 * pgad._f declares those text, and each reaches it as its value's text (the type's output function).
 */
typedef struct Door
{
	FmgrInfo	implementation;
	bool		as_text[FUNC_MAX_ARGS];
} Door;

/*
 * pgad.f(...) = pgad._f(...), for scalar and set-returning functions alike: the call info of the implementation
 * lives as long as the caller's, so a set-returning implementation keeps its state between rows.
 */
Datum
pgad_call(PG_FUNCTION_ARGS)
{
	Door	   *door = (Door *) fcinfo->flinfo->fn_extra;
	LOCAL_FCINFO(call, FUNC_MAX_ARGS);
	Datum		result;
	int			i;

	if (door == NULL)
	{
		HeapTuple	tuple;
		oidvector  *types;
		bool		any = false;

		door = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(Door));
		tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
		types = buildoidvector(((Form_pg_proc) GETSTRUCT(tuple))->proargtypes.values,
							   ((Form_pg_proc) GETSTRUCT(tuple))->pronargs);
		ReleaseSysCache(tuple);
		for (i = 0; i < types->dim1; i++)
			if (types->values[i] == ANYCOMPATIBLEOID || types->values[i] == ANYOID)
			{
				door->as_text[i] = any = true;
				types->values[i] = TEXTOID;
			}
		fmgr_info_cxt(implementation_of(fcinfo->flinfo->fn_oid, "_", "", any ? types : NULL),
					  &door->implementation, fcinfo->flinfo->fn_mcxt);
		door->implementation.fn_expr = fcinfo->flinfo->fn_expr;
		fcinfo->flinfo->fn_extra = door;
	}
	InitFunctionCallInfoData(*call, &door->implementation, PG_NARGS(), PG_GET_COLLATION(), fcinfo->context,
							 fcinfo->resultinfo);
	memcpy(call->args, fcinfo->args, PG_NARGS() * sizeof(NullableDatum));
	for (i = 0; i < PG_NARGS(); i++)
		if (door->as_text[i] && !call->args[i].isnull)
		{
			Oid			output;
			bool		varlena;

			getTypeOutputInfo(get_fn_expr_argtype(fcinfo->flinfo, i), &output, &varlena);
			call->args[i].value = CStringGetTextDatum(OidOutputFunctionCall(output, call->args[i].value));
		}
	result = call_plainly(call);
	fcinfo->isnull = call->isnull;
	return result;
}

/*
 * 3. pgad.pack(VARIADIC "any"): the aggregate every loader query runs. It appends each row's float8 values to one
 *    native float8 array per column (structure of arrays), skipping and counting rows with a NULL, and gives a
 *    bytea that numpy reads in place: a PackHeader, then each column's values, column after column. The state
 *    grows by doubling in the aggregate's memory context, so a row costs no allocation beyond that amortised
 *    growth. PARALLEL SAFE: the serial form is the same bytea, and combining two states appends the second's rows.
 *    The bytea is at most 1 GB, PostgreSQL's limit on a value: a state that would pass it stops with SQLSTATE
 *    54000 as soon as it does, and the loader then packs the rows a chunk at a time (pgad/loader.py).
 *
 *    A call holds its data's packed bytes about PACK_COPIES times over at its peak (measured: docs/security.md):
 *    while the query that packs them ends, the state (up to twice the rows, for the doubling), the bytea it gives
 *    and the copy of that in the query's result; later the Python bytes (numpy reads them in place), a
 *    standardised copy and the shuffled copies of a mini-batch optimizer. So that a call stays within
 *    pgad.memory_limit, a state holds at most pgad.memory_limit / PACK_COPIES of packed bytes, and what pgad.pack's
 *    states in one query (every group's, every chunk's) are charged together stays within the limit: each state
 *    its rows PACK_COPIES times over or the room it has reserved, whichever is more, and PACK_STATE_BYTES for
 *    itself and what one more group costs the rest of the call (the group's row in the query's result, its Python
 *    objects: measured, docs/security.md), the first state's excepted. The row or the group past the limit stops
 *    the query with SQLSTATE 53200 before anything grows. Each parallel worker counts its own states, and the
 *    leader its own and those it combines; the loader gives the error its final form, with the data's own size
 *    (pgad/loader.py).
 */
#define PACK_MAGIC		0x4b504750	/* "PGPK", as the first four bytes read on a little-endian machine */
#define PACK_FIRST_ROWS 16
#define PACK_COPIES		4
#define PACK_STATE_BYTES 2048	/* what a group costs besides its rows: a state, its group, its result's row */

typedef struct PackHeader
{
	uint32		magic;
	uint32		columns;
	int64		rows;			/* rows packed */
	int64		skipped;		/* rows skipped for a NULL */
} PackHeader;

typedef struct PackState
{
	int			columns;
	int64		rows;
	int64		skipped;
	int64		capacity;		/* rows each column has room for */
	float8	   *values;			/* column k's rows start at values[k * capacity] */
	int64		charged;		/* bytes charged for it against pgad.memory_limit (PackCharges) */
} PackState;

/*
 * What pgad.memory_limit charges the states of one aggregate in one query and one process, kept in its fn_extra.
 * It starts at minus one PACK_STATE_BYTES: the first state's own cost is the call's, as the rest of what every call
 * costs is.
 */
typedef struct PackCharges
{
	int64		charged;		/* bytes charged to its states */
	int64		rows;			/* rows packed, in all its states */
	int64		states;			/* states charged (pgad.pack: made; the aggregates: alive) */
} PackCharges;

/* The most rows whose bytea stays within MaxAllocSize. */
static int64
pack_max_rows(int columns)
{
	if (columns == 0)			/* a lambda that reads no column (pgad.loss_agg below) */
		return PG_INT64_MAX / 2;
	return (int64) ((MaxAllocSize - VARHDRSZ - sizeof(PackHeader)) / (sizeof(float8) * columns));
}

static void
pack_too_large(int64 rows, int columns)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("pgad cannot pack more than " INT64_FORMAT " rows of %d columns in one value", rows, columns),
			 errdetail("The packed rows would pass 1 GB, the largest value PostgreSQL stores."),
			 errhint("Pack the rows in chunks, as pgad's functions do; an aggregate's group must fit in one.")));
}

/* The most rows of so many columns that pgad.memory_limit lets a call pack. */
static int64
pack_limit_rows(int columns)
{
	if (columns == 0)
		return PG_INT64_MAX / 2;
	return (int64) memory_limit_kb * 1024 / (PACK_COPIES * sizeof(float8) * columns);
}

/* "2.5 MB", "640 MB": bytes as the memory limit's messages give them (pgad/loader.py's megabytes). */
static char *
megabytes(double bytes)
{
	double		mb = bytes / (1024.0 * 1024.0);

	return mb < 10 ? psprintf("%.1f MB", mb) : psprintf("%.0f MB", mb);
}

static void
pack_over_limit(int64 rows, int columns)
{
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(memory_limit_kb * 1024.0)),
			 errdetail("Packing stopped at row " INT64_FORMAT " of %d columns, 8 bytes a value, held up to %d times "
					   "over while a call loads and trains.", rows, columns, PACK_COPIES),
			 errhint("Train on a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or have a superuser "
					 "raise pgad.memory_limit.")));
}

/* A state with room for capacity rows, in context. */
static PackState *
pack_new(int columns, int64 capacity, MemoryContext context)
{
	PackState  *state = MemoryContextAllocZero(context, sizeof(PackState));

	state->columns = columns;
	state->capacity = Max(capacity, 1);
	state->values = MemoryContextAlloc(context, sizeof(float8) * columns * state->capacity);
	return state;
}

/*
 * The rows a state has room for once it holds rows rows: its capacity, doubled as often as they need (the error
 * past what pgad.memory_limit lets one state hold, or past 1 GB). pack_reserve grows the array to that: in place
 * where it can (repalloc of a large chunk is realloc, which moves the pages rather than copying them), the columns
 * after the first moving up to their new places, the last first.
 */
static int64
pack_room(const PackState *state, int64 rows)
{
	int64		max_rows = pack_max_rows(state->columns);
	int64		capacity = state->capacity;

	if (rows <= capacity)
		return capacity;
	if (rows > pack_limit_rows(state->columns))
		pack_over_limit(rows, state->columns);
	if (rows > max_rows)
		pack_too_large(max_rows, state->columns);
	max_rows = Min(max_rows, pack_limit_rows(state->columns));
	while (capacity < rows)
		capacity = Min(capacity * 2, max_rows);
	return capacity;
}

/* Room for at least rows rows, as pack_room gives it. */
static void
pack_reserve(PackState *state, int64 rows)
{
	int64		capacity = pack_room(state, rows);
	int			k;

	if (capacity == state->capacity)
		return;
	state->values = repalloc(state->values, sizeof(float8) * state->columns * capacity);
	for (k = state->columns - 1; k > 0; k--)
		memmove(state->values + k * capacity, state->values + k * state->capacity, sizeof(float8) * state->rows);
	state->capacity = capacity;
}

/* into with from's rows appended. */
static void
pack_append(PackState *into, const PackState *from)
{
	int			k;

	if (into->columns != from->columns)
		elog(ERROR, "pgad.pack combining states of %d and %d columns", into->columns, from->columns);
	pack_reserve(into, into->rows + from->rows);
	for (k = 0; k < into->columns; k++)
		memcpy(into->values + k * into->capacity + into->rows, from->values + k * from->capacity,
			   sizeof(float8) * from->rows);
	into->rows += from->rows;
	into->skipped += from->skipped;
}

/* A copy of state in context. */
static PackState *
pack_copy(const PackState *state, MemoryContext context)
{
	PackState  *copy = pack_new(state->columns, state->rows, context);

	pack_append(copy, state);
	return copy;
}

/* A new state, with room for a first few rows (fewer where pgad.memory_limit allows fewer), in context. */
static PackState *
pack_first(int columns, MemoryContext context)
{
	return pack_new(columns, Min(PACK_FIRST_ROWS, pack_limit_rows(columns)), context);
}

/* New charges for an aggregate's states. */
static PackCharges *
pack_charges(MemoryContext context)
{
	PackCharges *charges = MemoryContextAllocZero(context, sizeof(PackCharges));

	charges->charged = -PACK_STATE_BYTES;
	return charges;
}

/* pgad.pack's charges, in the fn_extra of the aggregate call fcinfo is of. */
static PackCharges *
pack_charges_of(FunctionCallInfo fcinfo)
{
	if (fcinfo->flinfo->fn_extra == NULL)
		fcinfo->flinfo->fn_extra = pack_charges(fcinfo->flinfo->fn_mcxt);
	return (PackCharges *) fcinfo->flinfo->fn_extra;
}

/* The error once the states of an aggregate are charged more than pgad.memory_limit (kept: pgad.pack's). */
static void
pack_over_charged(const PackCharges *charges, int columns, bool kept)
{
	if (kept)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(memory_limit_kb * 1024.0)),
				 errdetail("Packing stopped at row " INT64_FORMAT " of %d columns, in group " INT64_FORMAT ": a group "
						   "costs %d bytes besides its rows, 8 bytes a value held up to %d times over while a call "
						   "loads and trains.", charges->rows, columns, charges->states, PACK_STATE_BYTES,
						   PACK_COPIES),
				 errhint("Train on fewer groups or a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), "
						 "or have a superuser raise pgad.memory_limit.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(memory_limit_kb * 1024.0)),
			 errdetail("Packing stopped with " INT64_FORMAT " groups held at once, " INT64_FORMAT " rows of %d columns "
					   "in all: a group's state costs %d bytes besides its lambda, its weights and room for its rows, "
					   "8 bytes a value.", charges->states, charges->rows, columns, PACK_STATE_BYTES),
			 errhint("Train on fewer groups or a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or "
					 "have a superuser raise pgad.memory_limit.")));
}

/*
 * A state's charge becomes cost (bytes): the charges' total changes by the difference, and the error once it passes
 * pgad.memory_limit, before the state grows.
 */
static void
pack_charge(PackCharges *charges, int64 *charged, int64 cost, int columns, bool kept)
{
	charges->charged += cost - *charged;
	*charged = cost;
	if (charges->charged > (int64) memory_limit_kb * 1024)
		pack_over_charged(charges, columns, kept);
}

/*
 * What a state of so many columns is charged once it holds rows rows with room for room: PACK_STATE_BYTES, and its
 * rows copies times over or its room, whichever is more.
 */
static int64
pack_cost(int columns, int64 rows, int64 room, int copies)
{
	return PACK_STATE_BYTES + (int64) sizeof(float8) * columns * Max(rows * copies, room);
}

/* pgad.pack's state charged for holding rows rows (pgad.pack's rows count PACK_COPIES times: its result is kept). */
static void
pack_charge_rows(PackCharges *charges, PackState *state, int64 rows)
{
	charges->rows += rows - state->rows;
	if (state->charged == 0)
		charges->states++;
	pack_charge(charges, &state->charged, pack_cost(state->columns, rows, pack_room(state, rows), PACK_COPIES),
				state->columns, true);
}

/* One row appended: values[k] to column k. */
static inline void
pack_add_row(PackState *state, const float8 *values)
{
	int			k;

	if (state->rows == state->capacity)
		pack_reserve(state, state->rows + 1);
	for (k = 0; k < state->columns; k++)
		state->values[k * state->capacity + state->rows] = values[k];
	state->rows++;
}

/* The bytes pack_write writes: PackHeader, then each column's rows. */
static Size
pack_size(const PackState *state)
{
	return sizeof(PackHeader) + sizeof(float8) * state->columns * state->rows;
}

/* more_skipped is added to the header's count of rows skipped (the aggregates' rows that were NULL as a whole). */
static void
pack_write(const PackState *state, int64 more_skipped, char *out)
{
	PackHeader	header = {PACK_MAGIC, (uint32) state->columns, state->rows, state->skipped + more_skipped};
	int			k;

	memcpy(out, &header, sizeof(PackHeader));
	out += sizeof(PackHeader);
	for (k = 0; k < state->columns; k++)
		memcpy(out + sizeof(float8) * state->rows * k, state->values + k * state->capacity,
			   sizeof(float8) * state->rows);
}

/* pack_write's bytes as a bytea. */
static bytea *
pack_bytea(const PackState *state, int64 more_skipped)
{
	Size		size = VARHDRSZ + pack_size(state);
	bytea	   *result = palloc(size);

	SET_VARSIZE(result, size);
	pack_write(state, more_skipped, VARDATA(result));
	return result;
}

/* The state that the first size bytes at data begin with (pack_write's bytes; more may follow), in context. */
static PackState *
pack_read(const char *data, Size size, MemoryContext context)
{
	PackHeader	header;
	PackState  *state;
	int			k;

	if (size < sizeof(PackHeader))
		elog(ERROR, "pgad.pack state of %zu bytes, shorter than its header", size);
	memcpy(&header, data, sizeof(PackHeader));
	if (header.magic != PACK_MAGIC || header.columns > MaxHeapAttributeNumber || header.rows < 0 || header.skipped < 0 ||
		header.rows > pack_max_rows(header.columns) ||
		size < sizeof(PackHeader) + sizeof(float8) * header.columns * header.rows)
		elog(ERROR, "invalid pgad.pack state");
	state = pack_new(header.columns, header.rows, context);
	state->rows = header.rows;
	state->skipped = header.skipped;
	for (k = 0; k < state->columns; k++)
		memcpy(state->values + k * state->capacity, data + sizeof(PackHeader) + sizeof(float8) * header.rows * k,
			   sizeof(float8) * header.rows);
	return state;
}

PG_FUNCTION_INFO_V1(pgad_pack_step);

/* The transition function: (state internal, VARIADIC "any" of float8) → state. */
Datum
pgad_pack_step(PG_FUNCTION_ARGS)
{
	MemoryContext context;
	PackState  *state = PG_ARGISNULL(0) ? NULL : (PackState *) PG_GETARG_POINTER(0);
	int			columns = PG_NARGS() - 1;
	float8		values[FUNC_MAX_ARGS];
	int			k;

	if (!AggCheckCallContext(fcinfo, &context))
		elog(ERROR, "pgad_pack_step called in non-aggregate context");
	if (state == NULL)
	{
		if (get_fn_expr_variadic(fcinfo->flinfo))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("pgad.pack takes its columns as arguments, not as a VARIADIC array")));
		for (k = 1; k <= columns; k++)
			if (get_fn_expr_argtype(fcinfo->flinfo, k) != FLOAT8OID)
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("argument %d of pgad.pack is of type %s, not double precision", k,
								format_type_be(get_fn_expr_argtype(fcinfo->flinfo, k))),
						 errhint("Cast it: pgad.pack(x::float8, ...).")));
		state = pack_first(columns, context);
		pack_charge_rows(pack_charges_of(fcinfo), state, 0);
	}
	for (k = 0; k < columns; k++)
	{
		if (PG_ARGISNULL(k + 1))
		{
			state->skipped++;
			PG_RETURN_POINTER(state);
		}
		values[k] = PG_GETARG_FLOAT8(k + 1);
	}
	pack_charge_rows(pack_charges_of(fcinfo), state, state->rows + 1);
	pack_add_row(state, values);
	PG_RETURN_POINTER(state);
}

PG_FUNCTION_INFO_V1(pgad_pack_combine);

/*
 * The combine function: state1 with state2's rows appended (a copy of state2, in the aggregate's context, when
 * state1 is NULL: state2 may live in a shorter-lived context).
 */
Datum
pgad_pack_combine(PG_FUNCTION_ARGS)
{
	MemoryContext context;
	PackState  *state1 = PG_ARGISNULL(0) ? NULL : (PackState *) PG_GETARG_POINTER(0);
	PackState  *state2 = PG_ARGISNULL(1) ? NULL : (PackState *) PG_GETARG_POINTER(1);

	if (!AggCheckCallContext(fcinfo, &context))
		elog(ERROR, "pgad_pack_combine called in non-aggregate context");
	if (state2 == NULL)
	{
		if (state1 == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(state1);
	}
	if (state1 == NULL)
	{
		state1 = pack_new(state2->columns, state2->rows, context);
		pack_charge_rows(pack_charges_of(fcinfo), state1, 0);
	}
	pack_charge_rows(pack_charges_of(fcinfo), state1, state1->rows + state2->rows);
	pack_append(state1, state2);
	PG_RETURN_POINTER(state1);
}

PG_FUNCTION_INFO_V1(pgad_pack_bytes);

/*
 * The final and the serial function: the state as a bytea, PackHeader then the columns, each rows long. The state
 * is left as it was.
 */
Datum
pgad_pack_bytes(PG_FUNCTION_ARGS)
{
	PG_RETURN_BYTEA_P(pack_bytea((PackState *) PG_GETARG_POINTER(0), 0));
}

PG_FUNCTION_INFO_V1(pgad_pack_deserialize);

/* The deserial function: (bytea, internal) → the state the bytea holds, in the current memory context. */
Datum
pgad_pack_deserialize(PG_FUNCTION_ARGS)
{
	bytea	   *bytes = PG_GETARG_BYTEA_PP(0);
	Size		size = VARSIZE_ANY_EXHDR(bytes);
	PackState  *state;

	if (!AggCheckCallContext(fcinfo, NULL))
		elog(ERROR, "pgad_pack_deserialize called in non-aggregate context");
	state = pack_read(VARDATA_ANY(bytes), size, CurrentMemoryContext);
	if (pack_size(state) != size)
		elog(ERROR, "invalid pgad.pack state");
	PG_RETURN_POINTER(state);
}

/*
 * The element readers that pgad.pack's queries use in place of a subscript. The loader's query reads element k of
 * an array column as pgad._element(pgad_data.pixels, k, length, 'pixels') (pgad/loader.py), not as
 * (pgad_data.pixels)[k]: the data query may give other rows than when loader.lengths measured its arrays (random(),
 * a sequence, a function), and a subscript reads whatever array the row has, the wrong element of one that starts
 * at index 0, the first elements of a longer one, NULL (the row skipped) past the end of a shorter one and in a 2-D
 * or empty one. So every array is checked, in C, on the row that is read, as the native load checks it (part 6):
 * one dimension, from index 1, of the length the lambda reads; else SQLSTATE 2202E with the native load's message,
 * naming the column but not the row, which no call here can count (parallel workers, hashed chunks and groups see
 * the rows in other orders).
 */

/* name in double quotes, its own doubled: what pgad/loader.py's hints write (printer.quote_ident). */
static char *
always_quoted(const char *name)
{
	StringInfoData quoted;

	initStringInfo(&quoted);
	appendStringInfoChar(&quoted, '"');
	for (; *name != '\0'; name++)
	{
		if (*name == '"')
			appendStringInfoChar(&quoted, '"');
		appendStringInfoChar(&quoted, *name);
	}
	appendStringInfoChar(&quoted, '"');
	return quoted.data;
}

static void odd_array(const char *name, int64 row, ArrayType *array, int width) pg_attribute_noreturn();

/*
 * The error for an array of column name that is not one-dimensional from index 1 of width elements, the length the
 * lambda reads: as loader.lengths words it, since it may be the first to see the row; row is its place (1-based, in
 * the data's order), or 0 where the caller cannot know it ("a row").
 */
static void
odd_array(const char *name, int64 row, ArrayType *array, int width)
{
	const char *hint = psprintf("Every row's %s must be a one-dimensional array of the same length: filter or pad "
								"the rows that differ in the data query.", always_quoted(name));
	const char *where = row > 0 ? psprintf("row " INT64_FORMAT, row) : "a row";
	int			length = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));

	if (length == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("column \"%s\" has an empty array in %s of the data", name, where),
				 errhint("%s", hint)));
	if (ARR_NDIM(array) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("column \"%s\" has a %d-dimensional array in %s of the data", name, ARR_NDIM(array), where),
				 errdetail("pgad reads a one-dimensional array as a vector."),
				 errhint("%s", hint)));
	if (ARR_LBOUND(array)[0] != 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("column \"%s\" has an array that starts at index %d in %s of the data", name,
						ARR_LBOUND(array)[0], where),
				 errdetail("pgad reads arrays indexed from 1."),
				 errhint("%s", hint)));
	ereport(ERROR,
			(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
			 errmsg("column \"%s\" has arrays of different lengths", name),
			 errdetail("The lambda reads arrays of %d elements, the length pgad found in the data; %s's has %d.",
					   width, where, length),
			 errhint("%s", hint)));
}

/* What array_get_element needs to know of an array's element type, kept in pgad._element's fn_extra. */
typedef struct ElementType
{
	Oid			type;
	int16		typlen;
	bool		typbyval;
	char		typalign;
} ElementType;

PG_FUNCTION_INFO_V1(pgad_element);

/*
 * pgad._element(v anyarray, k int4, length int4, name text) → anyelement: element k of v, the array of the data's
 * column name in one row, where v is one-dimensional from index 1 of length elements; else the error (odd_array).
 * STRICT: a NULL array gives NULL, and so here does a NULL element, so that pgad.pack skips the row as it skips a
 * NULL number. Any element type: the loader's query casts the element to float8, never the whole array.
 */
Datum
pgad_element(PG_FUNCTION_ARGS)
{
	ArrayType  *array = PG_GETARG_ARRAYTYPE_P(0);
	int			index = PG_GETARG_INT32(1);
	int32		length = PG_GETARG_INT32(2);
	ElementType *element = (ElementType *) fcinfo->flinfo->fn_extra;
	Datum		value;
	bool		isnull;

	if (index < 1 || index > length)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pgad._element cannot read element %d of arrays of %d", index, length)));
	if (ARR_NDIM(array) != 1 || ARR_LBOUND(array)[0] != 1 || ARR_DIMS(array)[0] != length)
		odd_array(text_to_cstring(PG_GETARG_TEXT_PP(3)), 0, array, length);
	if (element == NULL)
	{
		element = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(ElementType));
		fcinfo->flinfo->fn_extra = element;
	}
	if (element->type != ARR_ELEMTYPE(array))
	{
		get_typlenbyvalalign(ARR_ELEMTYPE(array), &element->typlen, &element->typbyval, &element->typalign);
		element->type = ARR_ELEMTYPE(array);
	}
	value = array_get_element(PointerGetDatum(array), 1, &index, -1, element->typlen, element->typbyval,
							  element->typalign, &isnull);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(value);
}

/*
 * 4. The aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg(loss, weights, row[, options]),
 *    whose row argument is a whole-row reference of the data. The transition function packs, as pgad.pack does,
 *    the values of the columns the lambda reads, converted to float8 as a cast would convert them. Which columns
 *    those are is the parser's business: at a query's first row, and again when the lambda or the row type
 *    changes, it asks pgad._lambda_columns (PL/Python, no queries; it runs in parallel workers too), which checks
 *    them with the functions' own errors. The state holds the group's packed rows, its loss, weights and options
 *    (the same in every row of the group), and serialises to bytes that carry all of them, so partial states
 *    cross from parallel workers. The final function hands the packed columns to the PL/Python implementation
 *    pgad._<aggregate> (api.py), which differentiates, compiles and trains as the functions do.
 */
#define LAMBDA_MAGIC	0x414c4750	/* "PGLA" */

/* How to read a row for a lambda: kept for the whole query in the transition function's fn_extra (LambdaExtra). */
typedef struct RowReader
{
	MemoryContext context;		/* holds this reader; deleted when a new one replaces it */
	uint64		generation;		/* the how-many-th reader of this call site */
	text	   *loss;			/* the lambda it reads for */
	Oid			rowtype;		/* the row type and typmod it reads */
	int32		rowtypmod;
	TupleDesc	tupdesc;
	int			columns;		/* the columns the lambda reads, in the lambda's order: */
	AttrNumber *attnums;		/* their attribute numbers */
	Oid		   *types;			/* their types (one of the six numeric types) */
	ArrayType  *names;			/* their names, a text[] */
	float8	   *values;			/* one row's values */
} RowReader;

/* The transition function's fn_extra: its row reader, and the charges of its groups' states. */
typedef struct LambdaExtra
{
	RowReader  *reader;			/* NULL until the first row */
	PackCharges *charges;
} LambdaExtra;

typedef struct LambdaState
{
	PackCharges *charges;		/* where it is charged while it lives, or NULL (a parallel worker's, deserialised) */
	int64		charged;		/* what it is charged: lambda_cost */
	PackState  *pack;			/* the rows, from the group's first row that is not NULL; else NULL */
	int64		null_rows;		/* rows that were NULL as a whole (an outer join's missing side) */
	ArrayType  *names;			/* the columns packed, a text[] (with pack) */
	uint64		generation;		/* the reader the group's loss was last checked against */
	bool		varying;		/* whether loss, weights or options may vary by row (are not constants) */
	text	   *loss;			/* the group's lambda, weights and options (NULL when not given) */
	struct varlena *weights;
	struct varlena *options;
} LambdaState;

typedef struct LambdaHeader
{
	uint32		magic;
	uint32		packed;			/* 1 when the pack and the names follow */
	int64		null_rows;
} LambdaHeader;

/* The aggregate being computed, for messages: "pgad.gradient_agg". */
static char *
aggregate_name(FunctionCallInfo fcinfo)
{
	Aggref	   *aggref = AggGetAggref(fcinfo);

	if (aggref == NULL)
		return pstrdup("pgad's aggregate");
	return psprintf("pgad.%s", get_func_name(aggref->aggfnoid));
}

static struct varlena *
varlena_copy(struct varlena *value, MemoryContext context)
{
	struct varlena *copy = MemoryContextAlloc(context, VARSIZE_ANY(value));

	memcpy(copy, value, VARSIZE_ANY(value));
	return copy;
}

static bool
varlena_equal(struct varlena *a, struct varlena *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * The error unless the row's column attnum is one the aggregates can read as the lambda does: the only column of
 * its name (where pgad.loss's query would find the name ambiguous), of a type as_float8 converts. pgad._lambda_columns
 * checks the types with the functions' messages; this holds whatever it answers.
 */
static void
check_readable(FunctionCallInfo fcinfo, TupleDesc tupdesc, AttrNumber attnum)
{
	Form_pg_attribute column = TupleDescAttr(tupdesc, attnum - 1);
	int			k;

	for (k = 0; k < tupdesc->natts; k++)
	{
		Form_pg_attribute other = TupleDescAttr(tupdesc, k);

		if (!other->attisdropped && other->attnum != attnum &&
			strcmp(NameStr(other->attname), NameStr(column->attname)) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_AMBIGUOUS_COLUMN),
					 errmsg("column reference \"%s\" is ambiguous", NameStr(column->attname)),
					 errdetail("The row of %s has more than one column of that name.", aggregate_name(fcinfo)),
					 errhint("Name the columns of the row apart in its query (AS).")));
	}
	switch (column->atttypid)
	{
		case FLOAT8OID:
		case FLOAT4OID:
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case NUMERICOID:
		case BOOLOID:
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("column \"%s\" is of type %s, not a number", NameStr(column->attname),
					format_type_be(column->atttypid))));
}

/*
 * A reader of rows like row for the lambda loss: pgad._lambda_columns(loss, the row's column names, the names of
 * their types) gives the positions of the columns the lambda reads, or the error that the functions give for them.
 */
static RowReader *
row_reader(FunctionCallInfo fcinfo, text *loss, HeapTupleHeader row, uint64 generation)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext context = AllocSetContextCreate(fcinfo->flinfo->fn_mcxt, "pgad row reader",
												  ALLOCSET_SMALL_SIZES);
	RowReader  *reader = MemoryContextAllocZero(context, sizeof(RowReader));
	TupleDesc	tupdesc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(row), HeapTupleHeaderGetTypMod(row));
	Datum	   *names = palloc(sizeof(Datum) * Max(tupdesc->natts, 1));
	Datum	   *types = palloc(sizeof(Datum) * Max(tupdesc->natts, 1));
	Oid		   *oids = palloc(sizeof(Oid) * Max(tupdesc->natts, 1));
	AttrNumber *attnums = palloc(sizeof(AttrNumber) * Max(tupdesc->natts, 1));
	Oid			argtypes[3] = {TEXTOID, TEXTARRAYOID, TEXTARRAYOID};
	FmgrInfo	columns_of;
	Datum		result;
	ArrayType  *positions;
	Datum	   *chosen;
	int			count = 0;
	int			k;

	LOCAL_FCINFO(call, 3);

	for (k = 0; k < tupdesc->natts; k++)
	{
		Form_pg_attribute attribute = TupleDescAttr(tupdesc, k);

		if (attribute->attisdropped)
			continue;
		names[count] = CStringGetTextDatum(NameStr(attribute->attname));
		types[count] = CStringGetTextDatum(format_type_be(attribute->atttypid));
		oids[count] = attribute->atttypid;
		attnums[count++] = attribute->attnum;
	}
	fmgr_info(pgad_function("_lambda_columns", buildoidvector(argtypes, 3),
							get_func_namespace(fcinfo->flinfo->fn_oid)), &columns_of);
	InitFunctionCallInfoData(*call, &columns_of, 3, InvalidOid, NULL, NULL);
	call->args[0].value = PointerGetDatum(loss);
	call->args[1].value = PointerGetDatum(construct_array(names, count, TEXTOID, -1, false, TYPALIGN_INT));
	call->args[2].value = PointerGetDatum(construct_array(types, count, TEXTOID, -1, false, TYPALIGN_INT));
	call->args[0].isnull = call->args[1].isnull = call->args[2].isnull = false;
	result = call_plainly(call);
	if (call->isnull)
		elog(ERROR, "pgad._lambda_columns returned NULL");
	positions = DatumGetArrayTypeP(result);
	if (ARR_NDIM(positions) > 1 || ARR_HASNULL(positions) || ARR_ELEMTYPE(positions) != INT4OID)
		elog(ERROR, "pgad._lambda_columns returned no int4[] of positions");

	reader->context = context;
	reader->generation = generation;
	reader->loss = (text *) varlena_copy((struct varlena *) loss, context);
	reader->rowtype = HeapTupleHeaderGetTypeId(row);
	reader->rowtypmod = HeapTupleHeaderGetTypMod(row);
	MemoryContextSwitchTo(context);
	reader->tupdesc = lookup_rowtype_tupdesc_copy(reader->rowtype, reader->rowtypmod);	/* with missing values */
	MemoryContextSwitchTo(caller);
	reader->columns = ArrayGetNItems(ARR_NDIM(positions), ARR_DIMS(positions));
	reader->attnums = MemoryContextAlloc(context, sizeof(AttrNumber) * Max(reader->columns, 1));
	reader->types = MemoryContextAlloc(context, sizeof(Oid) * Max(reader->columns, 1));
	reader->values = MemoryContextAlloc(context, sizeof(float8) * Max(reader->columns, 1));
	chosen = palloc(sizeof(Datum) * Max(reader->columns, 1));
	for (k = 0; k < reader->columns; k++)
	{
		int			position = ((int32 *) ARR_DATA_PTR(positions))[k];

		if (position < 1 || position > count)
			elog(ERROR, "pgad._lambda_columns returned position %d of %d columns", position, count);
		reader->attnums[k] = attnums[position - 1];
		reader->types[k] = oids[position - 1];
		chosen[k] = names[position - 1];
		check_readable(fcinfo, tupdesc, reader->attnums[k]);
	}
	reader->names = (ArrayType *) varlena_copy((struct varlena *) construct_array(chosen, reader->columns, TEXTOID,
																				   -1, false, TYPALIGN_INT),
											   context);
	ReleaseTupleDesc(tupdesc);
	return reader;
}

/* One value as float8, as value::float8 would give it. */
static inline float8
as_float8(Datum value, Oid type)
{
	switch (type)
	{
		case FLOAT8OID:
			return DatumGetFloat8(value);
		case FLOAT4OID:
			return (float8) DatumGetFloat4(value);
		case INT2OID:
			return (float8) DatumGetInt16(value);
		case INT4OID:
			return (float8) DatumGetInt32(value);
		case INT8OID:
			return (float8) DatumGetInt64(value);
		case NUMERICOID:
			return DatumGetFloat8(DirectFunctionCall1(numeric_float8, value));
		case BOOLOID:			/* a column the lambda reads as a boolean: true is 1, as the loader's ::int4 */
			return DatumGetBool(value) ? 1.0 : 0.0;
	}
	elog(ERROR, "pgad cannot read a value of type %u as float8", type);
	return 0;
}

/* Raised when a row of a group has another loss, weights or options than the group's first row. */
static void
differs_in_group(FunctionCallInfo fcinfo, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the %s of %s %s between rows of the same group", what, aggregate_name(fcinfo),
					strcmp(what, "loss") == 0 ? "differs" : "differ"),
			 errhint("Give every row of a group the same %s: a constant, or a column the query groups by.", what)));
}

static void
same_in_group(FunctionCallInfo fcinfo, int argument, struct varlena *group, const char *what)
{
	struct varlena *value = PG_ARGISNULL(argument) ? NULL : PG_GETARG_VARLENA_PP(argument);

	if (!varlena_equal(value, group))
		differs_in_group(fcinfo, what);
}

/*
 * What a group's state is charged against pgad.memory_limit once it holds rows rows: PACK_STATE_BYTES, its lambda,
 * weights and options, and the room of its rows. The aggregates train one group at a time, so a group's rows count
 * once (each group alone must fit PACK_COPIES times over, as pack_room checks); but every group that the query holds
 * at once (all of them, when it groups by hashing) holds its state, so what they are charged together must fit.
 */
static int64
lambda_cost(const LambdaState *state, int64 rows)
{
	int64		cost = PACK_STATE_BYTES + VARSIZE_ANY(state->loss) + VARSIZE_ANY(state->weights) +
		(state->options == NULL ? 0 : VARSIZE_ANY(state->options));

	if (state->pack != NULL)
		cost += (int64) sizeof(float8) * state->pack->columns * pack_room(state->pack, rows);
	return cost;
}

/* state charged for holding rows rows (once it has a pack): the error past the limit, before it grows. */
static void
lambda_charge(LambdaState *state, int64 rows)
{
	if (state->charges == NULL)
		return;
	if (state->pack != NULL)
		state->charges->rows += rows - state->pack->rows;
	pack_charge(state->charges, &state->charged, lambda_cost(state, rows),
				state->pack == NULL ? 0 : state->pack->columns, false);
}

/* Called when the memory of the state arg ends (its group done, or the query): it is charged no more. */
static void
lambda_release(void *arg)
{
	LambdaState *state = (LambdaState *) arg;

	state->charges->charged -= state->charged;
	state->charges->rows -= state->pack == NULL ? 0 : state->pack->rows;
	state->charges->states--;
}

/* state, new in context, charged to charges for as long as context keeps it. */
static void
lambda_charge_new(LambdaState *state, PackCharges *charges, MemoryContext context)
{
	MemoryContextCallback *callback = MemoryContextAlloc(context, sizeof(MemoryContextCallback));

	state->charges = charges;
	state->charged = 0;
	charges->states++;
	charges->rows += state->pack == NULL ? 0 : state->pack->rows;
	callback->func = lambda_release;
	callback->arg = state;
	MemoryContextRegisterResetCallback(context, callback);
	lambda_charge(state, state->pack == NULL ? 0 : state->pack->rows);
}

PG_FUNCTION_INFO_V1(pgad_lambda_step);

/*
 * The transition function: (state internal, loss text, weights jsonb, row anyelement[, options jsonb]) → state.
 * A row whose loss or weights is NULL is ignored, as an aggregate ignores a NULL argument; a row that is NULL as a
 * whole, or NULL in a column the lambda reads, is skipped and counted.
 */
Datum
pgad_lambda_step(PG_FUNCTION_ARGS)
{
	MemoryContext context;
	LambdaState *state = PG_ARGISNULL(0) ? NULL : (LambdaState *) PG_GETARG_POINTER(0);
	LambdaExtra *extra = (LambdaExtra *) fcinfo->flinfo->fn_extra;
	RowReader  *reader;
	bool		with_options = PG_NARGS() > 4;
	HeapTupleHeader row;
	HeapTupleData tuple;
	int			k;

	if (!AggCheckCallContext(fcinfo, &context))
		elog(ERROR, "pgad_lambda_step called in non-aggregate context");
	if (extra == NULL)
	{
		extra = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(LambdaExtra));
		extra->charges = pack_charges(fcinfo->flinfo->fn_mcxt);
		fcinfo->flinfo->fn_extra = extra;
	}
	reader = extra->reader;
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
	{
		if (state == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(state);
	}
	if (state == NULL)
	{
		Oid			type = get_fn_expr_argtype(fcinfo->flinfo, 3);

		if (!type_is_rowtype(type))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("the row argument of %s is of type %s, not a row", aggregate_name(fcinfo),
							format_type_be(type)),
					 errhint("Pass the whole row of the data: %s(loss, weights, t) FROM your_table AS t.",
							 aggregate_name(fcinfo))));
		state = MemoryContextAllocZero(context, sizeof(LambdaState));
		/* Kept with a 4-byte header (PG_GETARG_VARLENA_P), as the serial form expects. */
		state->loss = (text *) varlena_copy(PG_GETARG_VARLENA_P(1), context);
		state->weights = varlena_copy(PG_GETARG_VARLENA_P(2), context);
		if (with_options && !PG_ARGISNULL(4))
			state->options = varlena_copy(PG_GETARG_VARLENA_P(4), context);
		/* A constant is the same in every row: only the others are compared with the group's first row. */
		state->varying = !get_fn_expr_arg_stable(fcinfo->flinfo, 1) || !get_fn_expr_arg_stable(fcinfo->flinfo, 2) ||
			(with_options && !get_fn_expr_arg_stable(fcinfo->flinfo, 4));
		lambda_charge_new(state, extra->charges, context);
	}
	else if (state->varying)
	{
		same_in_group(fcinfo, 1, (struct varlena *) state->loss, "loss");
		same_in_group(fcinfo, 2, state->weights, "weights");
		if (with_options)
			same_in_group(fcinfo, 4, state->options, "options");
	}
	if (PG_ARGISNULL(3))
	{
		state->null_rows++;
		PG_RETURN_POINTER(state);
	}
	row = PG_GETARG_HEAPTUPLEHEADER(3);
	if (reader == NULL || reader->rowtype != HeapTupleHeaderGetTypeId(row) ||
		reader->rowtypmod != HeapTupleHeaderGetTypMod(row) ||
		(state->generation != reader->generation &&
		 !varlena_equal((struct varlena *) reader->loss, (struct varlena *) state->loss)))
	{
		RowReader  *replaced = reader;

		reader = row_reader(fcinfo, state->loss, row, replaced == NULL ? 1 : replaced->generation + 1);
		extra->reader = reader;
		if (replaced != NULL)
			MemoryContextDelete(replaced->context);
	}
	state->generation = reader->generation;
	if (state->pack == NULL)
	{
		state->pack = pack_first(reader->columns, context);
		state->names = (ArrayType *) varlena_copy((struct varlena *) reader->names, context);
		lambda_charge(state, 0);
	}
	else if (state->pack->columns != reader->columns)
		elog(ERROR, "%s read %d columns of one row and %d of another", aggregate_name(fcinfo),
			 state->pack->columns, reader->columns);

	tuple.t_len = HeapTupleHeaderGetDatumLength(row);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = row;
	for (k = 0; k < reader->columns; k++)
	{
		bool		isnull;
		Datum		value = heap_getattr(&tuple, reader->attnums[k], reader->tupdesc, &isnull);

		if (isnull)
		{
			state->pack->skipped++;
			PG_RETURN_POINTER(state);
		}
		reader->values[k] = as_float8(value, reader->types[k]);
	}
	lambda_charge(state, state->pack->rows + 1);
	pack_add_row(state->pack, reader->values);
	PG_RETURN_POINTER(state);
}

/* A copy of state in context. */
static LambdaState *
lambda_copy(const LambdaState *state, MemoryContext context)
{
	LambdaState *copy = MemoryContextAllocZero(context, sizeof(LambdaState));

	copy->null_rows = state->null_rows;
	copy->varying = state->varying;
	copy->loss = (text *) varlena_copy((struct varlena *) state->loss, context);
	copy->weights = varlena_copy(state->weights, context);
	copy->options = state->options == NULL ? NULL : varlena_copy(state->options, context);
	if (state->pack != NULL)
	{
		copy->pack = pack_copy(state->pack, context);
		copy->names = (ArrayType *) varlena_copy((struct varlena *) state->names, context);
	}
	return copy;
}

PG_FUNCTION_INFO_V1(pgad_lambda_combine);

/* The combine function: state1 with state2's rows appended; both must be of the same loss, weights and options. */
Datum
pgad_lambda_combine(PG_FUNCTION_ARGS)
{
	MemoryContext context;
	LambdaState *state1 = PG_ARGISNULL(0) ? NULL : (LambdaState *) PG_GETARG_POINTER(0);
	LambdaState *state2 = PG_ARGISNULL(1) ? NULL : (LambdaState *) PG_GETARG_POINTER(1);

	if (!AggCheckCallContext(fcinfo, &context))
		elog(ERROR, "pgad_lambda_combine called in non-aggregate context");
	if (state2 == NULL)
	{
		if (state1 == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(state1);
	}
	if (state1 == NULL)
	{
		state1 = lambda_copy(state2, context);
		lambda_charge_new(state1, pack_charges_of(fcinfo), context);
		PG_RETURN_POINTER(state1);
	}
	if (!varlena_equal((struct varlena *) state1->loss, (struct varlena *) state2->loss))
		differs_in_group(fcinfo, "loss");
	if (!varlena_equal(state1->weights, state2->weights))
		differs_in_group(fcinfo, "weights");
	if (!varlena_equal(state1->options, state2->options))
		differs_in_group(fcinfo, "options");
	state1->null_rows += state2->null_rows;
	if (state2->pack != NULL && state1->pack == NULL)
	{
		state1->pack = pack_copy(state2->pack, context);
		state1->names = (ArrayType *) varlena_copy((struct varlena *) state2->names, context);
		if (state1->charges != NULL)
			state1->charges->rows += state1->pack->rows;
		lambda_charge(state1, state1->pack->rows);
	}
	else if (state2->pack != NULL)
	{
		lambda_charge(state1, state1->pack->rows + state2->pack->rows);
		pack_append(state1->pack, state2->pack);
	}
	PG_RETURN_POINTER(state1);
}

/* The serial form: LambdaHeader; the pack and the names when there is a pack; the loss, weights and options. */
static Size
varlena_size(struct varlena *value)
{
	return sizeof(int32) + (value == NULL ? 0 : VARSIZE_ANY(value));
}

static char *
varlena_write(struct varlena *value, char *out)
{
	int32		size = value == NULL ? -1 : (int32) VARSIZE_ANY(value);

	memcpy(out, &size, sizeof(int32));
	if (value != NULL)
		memcpy(out + sizeof(int32), value, size);
	return out + sizeof(int32) + Max(size, 0);
}

/* The varlena at *in (advanced past it), of at most the bytes left before end, copied into context. */
static struct varlena *
varlena_read(const char **in, const char *end, bool may_be_null, MemoryContext context)
{
	int32		size;
	struct varlena *value;

	if (end - *in < (ptrdiff_t) sizeof(int32))
		elog(ERROR, "invalid pgad aggregate state");
	memcpy(&size, *in, sizeof(int32));
	*in += sizeof(int32);
	if (size == -1 && may_be_null)
		return NULL;
	if (size < VARHDRSZ || size > end - *in)
		elog(ERROR, "invalid pgad aggregate state");
	value = MemoryContextAlloc(context, size);
	memcpy(value, *in, size);
	if (VARATT_IS_EXTENDED(value) || VARSIZE(value) != (Size) size)
		elog(ERROR, "invalid pgad aggregate state");
	*in += size;
	return value;
}

PG_FUNCTION_INFO_V1(pgad_lambda_serialize);

Datum
pgad_lambda_serialize(PG_FUNCTION_ARGS)
{
	LambdaState *state = (LambdaState *) PG_GETARG_POINTER(0);
	LambdaHeader header = {LAMBDA_MAGIC, state->pack != NULL, state->null_rows};
	Size		size = VARHDRSZ + sizeof(LambdaHeader) + varlena_size((struct varlena *) state->loss) +
		varlena_size(state->weights) + varlena_size(state->options);
	bytea	   *result;
	char	   *out;

	if (state->pack != NULL)
		size += pack_size(state->pack) + varlena_size((struct varlena *) state->names);
	if (size > MaxAllocSize)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a parallel worker's rows for a pgad aggregate pass 1 GB, the largest value PostgreSQL stores"),
				 errhint("Run the query with fewer rows per group, or with max_parallel_workers_per_gather = 0.")));
	result = palloc(size);
	SET_VARSIZE(result, size);
	out = VARDATA(result);
	memcpy(out, &header, sizeof(LambdaHeader));
	out += sizeof(LambdaHeader);
	if (state->pack != NULL)
	{
		pack_write(state->pack, 0, out);
		out = varlena_write((struct varlena *) state->names, out + pack_size(state->pack));
	}
	out = varlena_write((struct varlena *) state->loss, out);
	out = varlena_write(state->weights, out);
	varlena_write(state->options, out);
	PG_RETURN_BYTEA_P(result);
}

PG_FUNCTION_INFO_V1(pgad_lambda_deserialize);

Datum
pgad_lambda_deserialize(PG_FUNCTION_ARGS)
{
	bytea	   *bytes = PG_GETARG_BYTEA_PP(0);
	const char *in = VARDATA_ANY(bytes);
	const char *end = in + VARSIZE_ANY_EXHDR(bytes);
	LambdaHeader header;
	LambdaState *state;

	if (!AggCheckCallContext(fcinfo, NULL))
		elog(ERROR, "pgad_lambda_deserialize called in non-aggregate context");
	if (end - in < (ptrdiff_t) sizeof(LambdaHeader))
		elog(ERROR, "invalid pgad aggregate state");
	memcpy(&header, in, sizeof(LambdaHeader));
	in += sizeof(LambdaHeader);
	if (header.magic != LAMBDA_MAGIC || header.packed > 1 || header.null_rows < 0)
		elog(ERROR, "invalid pgad aggregate state");
	state = palloc0(sizeof(LambdaState));
	state->null_rows = header.null_rows;
	if (header.packed)
	{
		state->pack = pack_read(in, end - in, CurrentMemoryContext);
		in += pack_size(state->pack);
		state->names = (ArrayType *) varlena_read(&in, end, false, CurrentMemoryContext);
		if (ARR_NDIM(state->names) > 1 || ARR_ELEMTYPE(state->names) != TEXTOID || ARR_HASNULL(state->names) ||
			ArrayGetNItems(ARR_NDIM(state->names), ARR_DIMS(state->names)) != state->pack->columns)
			elog(ERROR, "invalid pgad aggregate state");
	}
	state->loss = (text *) varlena_read(&in, end, false, CurrentMemoryContext);
	state->weights = varlena_read(&in, end, false, CurrentMemoryContext);
	state->options = varlena_read(&in, end, true, CurrentMemoryContext);
	if (in != end)
		elog(ERROR, "invalid pgad aggregate state");
	PG_RETURN_POINTER(state);
}

static bytea *load_reference(const PackState *pack, int64 more_skipped);

PG_FUNCTION_INFO_V1(pgad_lambda_final);

/*
 * The final function of pgad.f_agg, pgad._f_agg_final(internal): pgad._f_agg(packed bytea, columns text[],
 * loss text, weights jsonb, options jsonb). Its packed bytea is, when rows were packed, a reference to the rows
 * copied once into a native load (load_reference, part 6), which numpy wraps as the functions' data is wrapped:
 * not the rows themselves, which the bytea and then PL/Python's Python bytes would copy twice; with no row packed,
 * pgad.pack's bytea (with no column). STRICT: a group with no rows gives NULL without a call.
 */
Datum
pgad_lambda_final(PG_FUNCTION_ARGS)
{
	LambdaState *state = (LambdaState *) PG_GETARG_POINTER(0);
	FmgrInfo   *implementation = (FmgrInfo *) fcinfo->flinfo->fn_extra;
	PackState	nothing = {0, 0, 0, 0, NULL, 0};
	bytea	   *packed = state->pack != NULL && state->pack->rows > 0 && state->pack->columns > 0 ?
		load_reference(state->pack, state->null_rows) :
		pack_bytea(state->pack != NULL ? state->pack : &nothing, state->null_rows);
	Datum		result;

	LOCAL_FCINFO(call, 5);

	if (implementation == NULL)
	{
		Oid			argtypes[5] = {BYTEAOID, TEXTARRAYOID, TEXTOID, JSONBOID, JSONBOID};

		implementation = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(FmgrInfo));
		fmgr_info_cxt(implementation_of(fcinfo->flinfo->fn_oid, "", "_final", buildoidvector(argtypes, 5)),
					  implementation, fcinfo->flinfo->fn_mcxt);
		fcinfo->flinfo->fn_extra = implementation;
	}
	InitFunctionCallInfoData(*call, implementation, 5, InvalidOid, NULL, NULL);
	call->args[0].value = PointerGetDatum(packed);
	call->args[1].value = state->names != NULL ? PointerGetDatum(state->names) :
		PointerGetDatum(construct_empty_array(TEXTOID));
	call->args[2].value = PointerGetDatum(state->loss);
	call->args[3].value = PointerGetDatum(state->weights);
	call->args[4].value = PointerGetDatum(state->options);
	call->args[0].isnull = call->args[1].isnull = call->args[2].isnull = call->args[3].isnull = false;
	call->args[4].isnull = state->options == NULL;
	result = call_plainly(call);
	fcinfo->isnull = call->isnull;
	return result;
}

/*
 * 5. Three doors from pgad's Python back into the server that run no query, so that they work in parallel mode,
 *    where PL/Python runs none (each plpy.execute is a subtransaction, which parallel mode forbids): the
 *    aggregates' transition function runs in parallel workers, and their final function in a leader that is in
 *    parallel mode. pgad/server.py calls them with ctypes, by name among the backend's symbols (PostgreSQL loads
 *    pgad.so with RTLD_GLOBAL), never from a file.
 */
extern PGDLLEXPORT int pgad_check_interrupts(char *sqlstate, char *message, int size);
extern PGDLLEXPORT char *pgad_setting(const char *name);
extern PGDLLEXPORT int pgad_error_query(const char *query, int position);

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

/*
 * Leaves query (UTF-8, as Python encodes it) and position (1-based, in characters) for the error pgad's Python
 * raises next, which pgad_call re-throws with them as its internal query and position (rethrow_plainly); a NULL
 * query forgets what was left. 1 when done; 0 when the text could not be kept (no memory, or a character the
 * server's encoding lacks), and the error then goes without it. Nothing here throws across Python's frames.
 */
int
pgad_error_query(const char *query, int position)
{
	MemoryContext context = CurrentMemoryContext;
	volatile int kept = 0;

	forget_pending_query();
	if (query == NULL)
		return 1;
	PG_TRY();
	{
		char	   *converted = pg_any_to_server(query, strlen(query), PG_UTF8);

		pending_query = MemoryContextStrdup(TopMemoryContext, converted);
		pending_position = position;
		if (converted != query)
			pfree(converted);
		kept = 1;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		FlushErrorState();
	}
	PG_END_TRY();
	return kept;
}

/*
 * 6. The native load (pgad_load), which the loader (pgad/loader.py) calls with ctypes in place of pgad.pack's
 *    query: the loader's query, SELECT x::pg_catalog.float8 AS c0, … FROM (<data>) AS pgad_data, an array column
 *    as pg_catalog.float8[], runs through SPI with a DestReceiver of its own that appends each row's float8
 *    values straight into one array per column: no aggregate state that doubles and moves, no bytea, no SPI
 *    result tuple, no Python bytes. An array column's elements become columns of their own, as the loader asks
 *    (the element index of each column, and the length the lambda was built for: loader.lengths measured it), and
 *    a NULL array or a NULL element skips the row, as a NULL number does.
 *
 *    The receiver trusts nothing that Python or an earlier query established about the rows: the loader measured
 *    the arrays' lengths with a query of its own, and a data query that is volatile (random(), a sequence, a
 *    function) can give other rows when it runs again here. So every row's array is checked, in C, on the row
 *    that is read: one dimension, from index 1, of the length the lambda was built for, of double precision;
 *    a row that is not is SQLSTATE 2202E (42804 for the type), whose message names the column (the loader
 *    aliases an array column by its name in the data) and the row, as loader.lengths names it. The plan's columns
 *    are checked against the types the load asks for before the first row, and the load's own arguments too.
 *
 *    Each column is one anonymous mmap, grown by mremap(MREMAP_MAYMOVE), which moves the pages rather than
 *    copying them, and handed to Python: numpy wraps it without a copy (pgad/loader.py's Mapped), and the last
 *    numpy view to go frees it (pgad_load_free_column). Until Python claims a load (pgad_load_claim), it is kept
 *    in a list that the end of the transaction frees, so that nothing leaks if Python fails in between.
 *
 *    The plan is serial (cursorOptions 0: no CURSOR_OPT_PARALLEL_OK) unless asked otherwise, so the rows come in
 *    the same order every time: measured (docs/design.md), allowing parallel workers changed nothing on a table
 *    scan (the planner chose the serial plan), and a parallel plan forced on it gained a few percent with an idle
 *    core and lost 1.6 times with a busy one, since the leader still receives and appends every row. Errors never
 *    cross Python's frames: the query runs in a subtransaction, as PL/Python's plpy.execute runs one (plpy_spi.c),
 *    and an error it raises, a cancel or a statement_timeout among them, is caught, the subtransaction rolled back,
 *    the columns freed, and the error's SQLSTATE, message, detail and hint (and context) handed back for Python to
 *    raise as plpy.execute would have. pgad.memory_limit stops the load at the row that passes it, before anything
 *    grows, with pgad.pack's error (53200: PACK_COPIES times the packed bytes, as pgad.pack counts them).
 *
 *    The aggregates' final function (part 4) hands its state's rows to Python the same way: copied once into a
 *    load, which a small bytea names (load_reference), rather than into a bytea that PL/Python copies again.
 */
#define LOAD_FIRST_BYTES ((Size) 64 * 1024)	/* each column's first mapping */

/* What a load gives Python; pgad/loader.py's LoadResult mirrors the fields up to values. */
typedef struct PgadLoad
{
	int64		rows;			/* rows loaded */
	int64		skipped;		/* rows skipped for a NULL */
	int32		columns;
	int32		sqlerrcode;		/* 0, or the error that stopped the load (its fields follow, malloc'd) */
	char	   *message;
	char	   *detail;
	char	   *hint;
	char	   *context;
	float8	  **values;			/* each column's rows; NULL once freed */
	/* Not seen by Python: */
	Size		mapped;			/* bytes each column's mapping has */
	int			references;		/* Python's reader, and each column not yet freed */
	uint64		id;				/* how load_reference's bytea names it */
	struct PgadLoad *next;		/* in unclaimed_loads */
} PgadLoad;

/* The loads that Python has not claimed yet: freed at the end of the transaction. */
static PgadLoad *unclaimed_loads = NULL;
static uint64 last_load_id = 0;

#define LOAD_MAGIC		0x4c504750	/* "PGPL": load_reference's bytea, where pgad.pack's has "PGPK" */

/* The DestReceiver: each row's values appended to the load's columns. */
typedef struct LoadReceiver
{
	DestReceiver pub;
	PgadLoad   *load;
	const int  *attributes;		/* per column: the query's column it reads (0-based) */
	const int  *indexes;		/* per column: 0 for a number, the element (1-based) of an array */
	const int  *lengths;		/* per column: 0 for a number, the length of the array it is an element of */
	int			natts;			/* the query's columns */
	int		   *widths;			/* per query column: -1 when no column reads it, 0 a number, else arrays' length */
	const char **names;			/* per query column: its name (an array column's, in the data) */
	const float8 **elements;	/* per query column: one row's array elements */
	int64		limit_rows;		/* the most rows pgad.memory_limit lets the load hold */
	MemoryContext row_context;	/* a row's detoasted arrays, reset after each row */
} LoadReceiver;

extern PGDLLEXPORT PgadLoad *pgad_load(const char *query, int columns, const int *attributes, const int *indexes,
									   const int *lengths, int parallel);
extern PGDLLEXPORT void pgad_load_claim(PgadLoad *load);
extern PGDLLEXPORT void pgad_load_free_column(PgadLoad *load, int column);
extern PGDLLEXPORT void pgad_load_done(PgadLoad *load, int wrapped);
extern PGDLLEXPORT int pgad_load_unclaimed(void);
extern PGDLLEXPORT PgadLoad *pgad_load_take(uint64 id);

/* The load is freed once nothing refers to it: its strings and itself (its columns are freed one at a time). */
static void
load_unref(PgadLoad *load)
{
	if (--load->references > 0)
		return;
	free(load->message);
	free(load->detail);
	free(load->hint);
	free(load->context);
	free(load->values);
	free(load);
}

/*
 * Frees column k's mapping (once; nothing when it is gone already). Safe anywhere, outside a transaction too: it
 * touches nothing of PostgreSQL's.
 */
void
pgad_load_free_column(PgadLoad *load, int column)
{
	if (column < 0 || column >= load->columns || load->values[column] == NULL)
		return;
	munmap(load->values[column], load->mapped);
	load->values[column] = NULL;
	load_unref(load);
}

static void
load_free_columns(PgadLoad *load, int from)
{
	int			k;

	for (k = from; k < load->columns; k++)
		pgad_load_free_column(load, k);
}

/* Python has the load: the transaction's end no longer frees it. */
void
pgad_load_claim(PgadLoad *load)
{
	PgadLoad  **link;

	for (link = &unclaimed_loads; *link != NULL; link = &(*link)->next)
		if (*link == load)
		{
			*link = load->next;
			break;
		}
}

/*
 * Python is done reading the load: it wrapped its first wrapped columns (each freed later by its numpy arrays'
 * finaliser), and the others, if any, are freed now.
 */
void
pgad_load_done(PgadLoad *load, int wrapped)
{
	load_free_columns(load, Max(wrapped, 0));
	load_unref(load);
}

/* How many loads wait for Python to claim them (the tests: none, between calls). */
int
pgad_load_unclaimed(void)
{
	int			count = 0;
	PgadLoad   *load;

	for (load = unclaimed_loads; load != NULL; load = load->next)
		count++;
	return count;
}

/* At the end of a transaction, the loads Python never claimed (it failed between pgad_load and its claim). */
static void
load_xact_callback(XactEvent event, void *arg)
{
	while (unclaimed_loads != NULL)
	{
		PgadLoad   *load = unclaimed_loads;

		unclaimed_loads = load->next;
		pgad_load_done(load, 0);
	}
}

/* A copy of s with malloc, or NULL (for none, or no memory: the error then goes without it). */
static char *
load_strdup(const char *s)
{
	return s == NULL ? NULL : strdup(s);
}

/* The error for a load whose own arguments (the loader's, not the data's) do not fit the query's plan. */
static void
load_misread(int column, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("pgad's load cannot read its column %d: %s", column, why)));
}

/*
 * Before the first row: the query's columns that the load reads, of the types it reads them as (float8, or
 * float8[] for an array's elements), and each element within the one length its array column is read at.
 */
static void
load_receiver_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
	LoadReceiver *receiver = (LoadReceiver *) self;
	int			k;

	receiver->natts = typeinfo->natts;
	receiver->widths = palloc(sizeof(int) * Max(typeinfo->natts, 1));
	receiver->names = palloc0(sizeof(char *) * Max(typeinfo->natts, 1));
	receiver->elements = palloc0(sizeof(float8 *) * Max(typeinfo->natts, 1));
	for (k = 0; k < typeinfo->natts; k++)
	{
		receiver->widths[k] = -1;
		receiver->names[k] = pstrdup(NameStr(TupleDescAttr(typeinfo, k)->attname));
	}
	for (k = 0; k < receiver->load->columns; k++)
	{
		int			a = receiver->attributes[k];
		int			index = receiver->indexes[k];
		int			width = index > 0 ? receiver->lengths[k] : 0;
		Oid			expected = index > 0 ? FLOAT8ARRAYOID : FLOAT8OID;

		if (a < 0 || a >= typeinfo->natts)
			load_misread(k, psprintf("the query has %d columns, not %d", typeinfo->natts, a + 1));
		if (TupleDescAttr(typeinfo, a)->atttypid != expected)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of pgad's load is of type %s, not %s", receiver->names[a],
							format_type_be(TupleDescAttr(typeinfo, a)->atttypid), format_type_be(expected))));
		if (index < 0 || index > width)
			load_misread(k, psprintf("element %d of arrays of %d", index, width));
		if (receiver->widths[a] >= 0 && receiver->widths[a] != width)
			load_misread(k, "read as arrays of two lengths, or as a number and an array");
		receiver->widths[a] = width;
	}
}

/*
 * Room for more rows in every column: each mapping doubled by mremap, to at most the room for the rows
 * pgad.memory_limit allows (the caller has checked the limit). A column that cannot grow frees every mapping.
 */
static void
load_grow(LoadReceiver *receiver)
{
	PgadLoad   *load = receiver->load;
	Size		page = (Size) sysconf(_SC_PAGESIZE);
	Size		limit = ((Size) receiver->limit_rows * sizeof(float8) + page - 1) / page * page;
	Size		mapped = Min(load->mapped * 2, Max(limit, load->mapped + page));
	int			k;

	for (k = 0; k < load->columns; k++)
	{
		void	   *moved = mremap(load->values[k], load->mapped, mapped, MREMAP_MAYMOVE);

		if (moved == MAP_FAILED)
		{
			int			j;

			for (j = 0; j < k; j++)		/* these have grown already: freed at their new size */
			{
				munmap(load->values[j], mapped);
				load->values[j] = NULL;
				load_unref(load);
			}
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("pgad could not grow a loaded column to %zu bytes.", mapped)));
		}
		load->values[k] = moved;
	}
	load->mapped = mapped;
}

/*
 * One row: its values appended to the columns; a row with a NULL (a number, an array or an element) skipped and
 * counted; an array of another shape than the lambda reads, the error (odd_array).
 */
static bool
load_receive(TupleTableSlot *slot, DestReceiver *self)
{
	LoadReceiver *receiver = (LoadReceiver *) self;
	PgadLoad   *load = receiver->load;
	MemoryContext outer = NULL;
	int64		row = load->rows;
	int			a;
	int			k;

	CHECK_FOR_INTERRUPTS();
	slot_getallattrs(slot);
	for (a = 0; a < receiver->natts; a++)
	{
		ArrayType  *array;

		if (receiver->widths[a] < 0)
			continue;
		if (slot->tts_isnull[a])
		{
			load->skipped++;
			goto done;
		}
		if (receiver->widths[a] == 0)
			continue;
		if (outer == NULL)
			outer = MemoryContextSwitchTo(receiver->row_context);
		array = DatumGetArrayTypeP(slot->tts_values[a]);
		if (ARR_ELEMTYPE(array) != FLOAT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of pgad's load holds an array of type %s, not double precision",
							receiver->names[a], format_type_be(ARR_ELEMTYPE(array)))));
		if (ARR_NDIM(array) != 1 || ARR_LBOUND(array)[0] != 1 || ARR_DIMS(array)[0] != receiver->widths[a])
			odd_array(receiver->names[a], load->rows + load->skipped + 1, array, receiver->widths[a]);
		if (array_contains_nulls(array))
		{
			load->skipped++;
			goto done;
		}
		receiver->elements[a] = (const float8 *) ARR_DATA_PTR(array);
	}
	if (row + 1 > receiver->limit_rows)
		pack_over_limit(row + 1, load->columns);
	if (row == (int64) (load->mapped / sizeof(float8)))
		load_grow(receiver);
	for (k = 0; k < load->columns; k++)
	{
		int			index = receiver->indexes[k];

		a = receiver->attributes[k];
		if (index == 0)
			load->values[k][row] = DatumGetFloat8(slot->tts_values[a]);
		else
			memcpy(&load->values[k][row], receiver->elements[a] + (index - 1), sizeof(float8));
	}
	load->rows++;
done:
	if (outer != NULL)
	{
		MemoryContextSwitchTo(outer);
		MemoryContextReset(receiver->row_context);
	}
	return true;
}

static void
load_receiver_shutdown(DestReceiver *self)
{
}

static void
load_receiver_destroy(DestReceiver *self)
{
}

/*
 * A new load of so many columns, each mapped with mapped bytes, on the unclaimed list; with its error set (and no
 * column) when the memory could not be mapped; NULL when there is no memory even for that.
 */
static PgadLoad *
load_new(int columns, Size mapped)
{
	PgadLoad   *load = calloc(1, sizeof(PgadLoad));
	int			k;

	if (load == NULL)
		return NULL;
	load->references = 1;
	load->columns = Max(columns, 0);
	load->mapped = Max(mapped, (Size) sysconf(_SC_PAGESIZE));
	load->values = calloc(Max(load->columns, 1), sizeof(float8 *));
	if (load->values == NULL)
	{
		free(load);
		return NULL;
	}
	load->id = ++last_load_id;
	load->next = unclaimed_loads;
	unclaimed_loads = load;
	for (k = 0; k < load->columns; k++)
	{
		void	   *mapping = mmap(NULL, load->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (mapping == MAP_FAILED)
		{
			load_free_columns(load, 0);
			load->sqlerrcode = ERRCODE_OUT_OF_MEMORY;
			load->message = load_strdup("out of memory");
			load->detail = load_strdup("pgad could not map memory for a loaded column.");
			return load;
		}
		load->values[k] = mapping;
		load->references++;
	}
	return load;
}

/* The query, run into load's columns in a subtransaction; an error is left in load's fields. */
static void
load_run(PgadLoad *load, const char *query, const int *attributes, const int *indexes, const int *lengths,
		 int parallel)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		LoadReceiver receiver;
		SPIExecuteOptions options;
		SPIPlanPtr	plan;
		int			result;
		const char *text;

		/* From here to SPI_finish, allocations are in SPI's procedure context, which SPI_finish (or the abort) frees. */
		if ((result = SPI_connect()) != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(result));
		memset(&receiver, 0, sizeof(receiver));
		receiver.pub.receiveSlot = load_receive;
		receiver.pub.rStartup = load_receiver_startup;
		receiver.pub.rShutdown = load_receiver_shutdown;
		receiver.pub.rDestroy = load_receiver_destroy;
		receiver.pub.mydest = DestNone;
		receiver.load = load;
		receiver.attributes = attributes;
		receiver.indexes = indexes;
		receiver.lengths = lengths;
		receiver.limit_rows = pack_limit_rows(load->columns);
		receiver.row_context = AllocSetContextCreate(CurrentMemoryContext, "pgad load row", ALLOCSET_SMALL_SIZES);
		/* The query's text is UTF-8, as Python encodes it; SPI takes the server's encoding. */
		text = pg_any_to_server(query, strlen(query), PG_UTF8);
		plan = SPI_prepare_cursor(text, 0, NULL, parallel ? CURSOR_OPT_PARALLEL_OK : 0);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare_cursor failed: %s", SPI_result_code_string(SPI_result));
		memset(&options, 0, sizeof(options));
		/*
		 * In the caller's statement's snapshot, as a STABLE function's plpy.execute runs its queries (pgad.train,
		 * VOLATILE, writes its model only after it has loaded).
		 */
		options.read_only = ActiveSnapshotSet();
		options.dest = &receiver.pub;
		if ((result = SPI_execute_plan_extended(plan, &options)) < 0)
			elog(ERROR, "SPI_execute_plan_extended failed: %s", SPI_result_code_string(result));
		if ((result = SPI_finish()) != SPI_OK_FINISH)
			elog(ERROR, "SPI_finish failed: %s", SPI_result_code_string(result));
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(context);
		error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
		load_free_columns(load, 0);
		load->rows = 0;
		load->sqlerrcode = error->sqlerrcode != 0 ? error->sqlerrcode : ERRCODE_INTERNAL_ERROR;
		load->message = load_strdup(error->message);
		load->detail = load_strdup(error->detail);
		load->hint = load_strdup(error->hint);
		load->context = load_strdup(error->context);
		FreeErrorData(error);
	}
	PG_END_TRY();
}

/*
 * Runs query and loads columns columns of it: column k is the query's column attributes[k] (0-based), a float8,
 * or element indexes[k] (1-based) of it, a float8[] whose every array must have lengths[k] elements, when
 * indexes[k] > 0; parallel lets the planner choose
 * parallel workers. The load, with its columns or its error (sqlerrcode), or NULL when there is no memory even for
 * that. Python claims it at once (pgad_load_claim), reads it and says when it is done (pgad_load_done). Nothing
 * here throws across Python's frames.
 */
PgadLoad *
pgad_load(const char *query, int columns, const int *attributes, const int *indexes, const int *lengths,
		  int parallel)
{
	PgadLoad   *load = load_new(columns, LOAD_FIRST_BYTES);

	if (load != NULL && load->sqlerrcode == 0)
		load_run(load, query, attributes, indexes, lengths, parallel);
	return load;
}

/*
 * The rows of an aggregate's state (pgad.pack's form), copied into a new load for pgad's Python to take, and the
 * bytea that names it: a PackHeader whose magic is LOAD_MAGIC, then the load's id. Python takes the load by its id
 * (pgad_load_take), among this backend's loads not yet claimed, so a bytea can name nothing else; one it never takes
 * is freed at the end of the transaction, as every unclaimed load is.
 */
static bytea *
load_reference(const PackState *pack, int64 more_skipped)
{
	Size		page = (Size) sysconf(_SC_PAGESIZE);
	PgadLoad   *load = load_new(pack->columns, ((Size) pack->rows * sizeof(float8) + page - 1) / page * page);
	PackHeader	header = {LOAD_MAGIC, (uint32) pack->columns, pack->rows, pack->skipped + more_skipped};
	Size		size = VARHDRSZ + sizeof(PackHeader) + sizeof(uint64);
	bytea	   *result;
	int			k;

	if (load == NULL || load->sqlerrcode != 0)
	{
		if (load != NULL)
		{
			pgad_load_claim(load);
			pgad_load_done(load, 0);
		}
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("pgad could not map memory for an aggregate's rows.")));
	}
	for (k = 0; k < pack->columns; k++)
		memcpy(load->values[k], pack->values + k * pack->capacity, sizeof(float8) * pack->rows);
	load->rows = pack->rows;
	load->skipped = header.skipped;
	result = palloc(size);
	SET_VARSIZE(result, size);
	memcpy(VARDATA(result), &header, sizeof(PackHeader));
	memcpy(VARDATA(result) + sizeof(PackHeader), &load->id, sizeof(uint64));
	return result;
}

/* The unclaimed load of this id, claimed; NULL when there is none. */
PgadLoad *
pgad_load_take(uint64 id)
{
	PgadLoad   *load;

	for (load = unclaimed_loads; load != NULL; load = load->next)
		if (load->id == id)
		{
			pgad_load_claim(load);
			return load;
		}
	return NULL;
}

/*
 * 7. The relations a training read (pgad/models/catalog.py, relations_read). The executor checks the privileges of
 *    every query it runs, a function's queries included, against its range table; a relation whose SELECT it checks
 *    as the current user (checkAsUser unset) is one this role, or the owner of a SECURITY DEFINER function it runs,
 *    read; a view's own relations are checked as the view's owner (unless the view is security_invoker), and the
 *    view as the reader: the view is noted, and of its relations those whose row-level security filters what the
 *    owner reads (the policies' expressions run as the reader: current_user is the reader's, so the view's rows may
 *    be the reader's own). While pgad_reads_begin's recordings are open, each such relation is noted once, whichever
 *    subtransaction read it (one rolled back still read it); the notes go at the end of the transaction.
 */
extern PGDLLEXPORT void pgad_reads_begin(void);
extern PGDLLEXPORT void pgad_reads_end(void);
extern PGDLLEXPORT int pgad_reads(Oid *oids, int size);

static int	reads_open = 0;		/* the recordings open: trainings, one inside another's data query */
static Oid *reads_noted = NULL; /* the relations noted since the outermost opened, in TopMemoryContext */
static int	reads_count = 0;
static int	reads_capacity = 0;

/* Note relid, once. */
static void
reads_note(Oid relid)
{
	int			k;

	for (k = 0; k < reads_count; k++)
		if (reads_noted[k] == relid)
			return;
	if (reads_count == reads_capacity)
	{
		int			capacity = Max(16, reads_capacity * 2);

		reads_noted = reads_noted == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * capacity) :
			repalloc(reads_noted, sizeof(Oid) * capacity);
		reads_capacity = capacity;
	}
	reads_noted[reads_count++] = relid;
}

/* ExecutorCheckPerms_hook: called once the executor's own checks of range_table have passed. */
static bool
reads_checked(List *range_table, bool ereport_on_violation)
{
	ListCell   *l;

	if (reads_open > 0)
		foreach(l, range_table)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, l);

			if (rte->rtekind != RTE_RELATION || !(rte->requiredPerms & ACL_SELECT))
				continue;
			if (!OidIsValid(rte->checkAsUser) ||
				check_enable_rls(rte->relid, rte->checkAsUser, true) == RLS_ENABLED)
				reads_note(rte->relid);
		}
	return next_check_perms == NULL || next_check_perms(range_table, ereport_on_violation);
}

/* Open a recording: the outermost starts with nothing noted. */
void
pgad_reads_begin(void)
{
	if (reads_open++ == 0)
		reads_count = 0;
}

/* Close the innermost recording. */
void
pgad_reads_end(void)
{
	if (reads_open > 0)
		reads_open--;
}

/* The relations noted (at most size of them into oids) and how many there are; -1 when no recording is open. */
int
pgad_reads(Oid *oids, int size)
{
	if (reads_open == 0)
		return -1;
	if (reads_count > 0 && size > 0)
		memcpy(oids, reads_noted, sizeof(Oid) * Min(size, reads_count));
	return reads_count;
}

/* At the end of a transaction no recording is open (one a failed training left open closes here). */
static void
reads_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
	{
		reads_open = 0;
		reads_count = 0;
	}
}
