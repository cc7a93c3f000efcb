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
 *    a PL/Python transition function would cost a microsecond a row.
 */
#include "postgres.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
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
							"Rows per chunk when loading data; 0 loads it whole, in chunks only past 1 GB.",
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
	MarkGUCPrefixReserved("pgad");
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
 * anycompatible (one that takes a number or a text, as pgad.train's validation): PL/Python takes no polymorphic
 * type, so pgad._f declares those text, and each reaches it as its value's text (the type's output function).
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
			if (types->values[i] == ANYCOMPATIBLEOID)
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

PG_FUNCTION_INFO_V1(pgad_lambda_final);

/*
 * The final function of pgad.f_agg, pgad._f_agg_final(internal): pgad._f_agg(packed bytea, columns text[],
 * loss text, weights jsonb, options jsonb), whose packed bytea is pgad.pack's (with no column when no row was
 * packed). STRICT: a group with no rows gives NULL without a call.
 */
Datum
pgad_lambda_final(PG_FUNCTION_ARGS)
{
	LambdaState *state = (LambdaState *) PG_GETARG_POINTER(0);
	FmgrInfo   *implementation = (FmgrInfo *) fcinfo->flinfo->fn_extra;
	PackState	nothing = {0, 0, 0, 0, NULL, 0};
	bytea	   *packed = pack_bytea(state->pack != NULL ? state->pack : &nothing, state->null_rows);
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
