/*
 * pgad.c: the native part of pgad, loaded into every backend that calls a pgad function.
 *
 * Three small jobs that Python cannot do from inside PL/Python, or not fast enough:
 *
 * 1. pgad's settings (_PG_init). Defining them here, rather than leaving them as placeholders anyone may SET,
 *    lets the resource limits be PGC_SUSET: only a superuser changes them, in postgresql.conf, ALTER SYSTEM,
 *    ALTER ROLE/DATABASE or SET. The Python package reads them per call (pgad/server.py).
 *
 * 2. The door from SQL into Python (pgad_call). Every public function pgad.f is a C function that calls its
 *    PL/Python implementation pgad._f, found by name and argument types in pgad's own schema, never through the
 *    caller's search_path. A call made from C is not subject to the EXECUTE check, so the implementations are
 *    not executable by PUBLIC while the public functions keep running as the caller (SECURITY INVOKER), with
 *    the caller's privileges on the data. An error the implementation raises on purpose (plpy.Error, or a
 *    server error passed through, a cancel among them) leaves as the server's own: PL/Python's
 *    "plpy.Error: " prefix and the Python traceback dropped, the SQLSTATE, DETAIL and HINT kept. Any other
 *    Python exception, a bug, keeps its traceback.
 *
 * 3. The packing aggregate pgad.pack (below), which turns rows into numpy's columns at about the cost of a scan:
 *    a PL/Python transition function would cost a microsecond a row.
 */
#include "postgres.h"

#include <limits.h>
#include <string.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

PG_MODULE_MAGIC;

#ifndef PGAD_CACHE_DIRECTORY
#define PGAD_CACHE_DIRECTORY "/var/cache/pgad"
#endif

static int	max_lambda_bytes = 1024 * 1024;
static int	max_lambda_nodes = 100000;
static char *cache_directory = NULL;
static int	cache_size_kb = 256 * 1024;
static int	load_chunk_rows = 0;

void		_PG_init(void);

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
							PGC_USERSET, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("pgad");
}

/*
 * The oid of pgad._f, the implementation of the public function fn = pgad.f: same schema, same argument types.
 */
static Oid
implementation_of(Oid fn)
{
	HeapTuple	tuple;
	Form_pg_proc proc;
	char		name[NAMEDATALEN];
	Oid			implementation;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	snprintf(name, sizeof(name), "_%s", NameStr(proc->proname));
	implementation = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum(name),
									 PointerGetDatum(&proc->proargtypes), ObjectIdGetDatum(proc->pronamespace));
	ReleaseSysCache(tuple);
	if (!OidIsValid(implementation))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("pgad's implementation function \"%s\" does not exist", name),
				 errhint("The extension's objects were changed by hand: DROP EXTENSION pgad and CREATE it again.")));
	return implementation;
}

/*
 * Re-throws the error being handled, as the server's own where pgad raised it on purpose: PL/Python writes it as
 * "plpy.Error: message" or "spiexceptions.QueryCanceled: message", with the Python traceback as its CONTEXT.
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
		error->message = pstrdup(colon + 2);
		error->context = NULL;
		error->internalquery = NULL;
		error->internalpos = 0;
	}
	ReThrowError(error);
}

PG_FUNCTION_INFO_V1(pgad_call);

/*
 * pgad.f(...) = pgad._f(...), for scalar and set-returning functions alike: the call info of the implementation
 * lives as long as the caller's, so a set-returning implementation keeps its state between rows.
 */
Datum
pgad_call(PG_FUNCTION_ARGS)
{
	FmgrInfo   *implementation = (FmgrInfo *) fcinfo->flinfo->fn_extra;
	MemoryContext context = CurrentMemoryContext;
	LOCAL_FCINFO(call, FUNC_MAX_ARGS);
	Datum		result = (Datum) 0;

	if (implementation == NULL)
	{
		implementation = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(FmgrInfo));
		fmgr_info_cxt(implementation_of(fcinfo->flinfo->fn_oid), implementation, fcinfo->flinfo->fn_mcxt);
		implementation->fn_expr = fcinfo->flinfo->fn_expr;
		fcinfo->flinfo->fn_extra = implementation;
	}
	InitFunctionCallInfoData(*call, implementation, PG_NARGS(), PG_GET_COLLATION(), fcinfo->context,
							 fcinfo->resultinfo);
	memcpy(call->args, fcinfo->args, PG_NARGS() * sizeof(NullableDatum));
	PG_TRY();
	{
		result = FunctionCallInvoke(call);
	}
	PG_CATCH();
	{
		rethrow_plainly(context);
	}
	PG_END_TRY();
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
 */
#define PACK_MAGIC		0x4b504750	/* "PGPK", as the first four bytes read on a little-endian machine */
#define PACK_FIRST_ROWS 256

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
} PackState;

/* The most rows whose bytea stays within MaxAllocSize. */
static int64
pack_max_rows(int columns)
{
	return (int64) ((MaxAllocSize - VARHDRSZ - sizeof(PackHeader)) / (sizeof(float8) * columns));
}

static void
pack_too_large(int64 rows, int columns)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("pgad.pack cannot pack more than " INT64_FORMAT " rows of %d columns", rows, columns),
			 errdetail("The packed rows would pass 1 GB, the largest value PostgreSQL stores."),
			 errhint("Pack the rows in chunks, as pgad's loader does.")));
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
 * Room for at least rows rows: the capacity doubles. The array grows in place where it can (repalloc of a large
 * chunk is realloc, which moves the pages rather than copying them), and the columns after the first move up to
 * their new places, the last first.
 */
static void
pack_reserve(PackState *state, int64 rows)
{
	int64		max_rows = pack_max_rows(state->columns);
	int64		capacity = state->capacity;
	int			k;

	if (rows <= capacity)
		return;
	if (rows > max_rows)
		pack_too_large(max_rows, state->columns);
	while (capacity < rows)
		capacity = Min(capacity * 2, max_rows);
	state->values = repalloc(state->values, sizeof(float8) * state->columns * capacity);
	for (k = state->columns - 1; k > 0; k--)
		memmove(state->values + k * capacity, state->values + k * state->capacity, sizeof(float8) * state->rows);
	state->capacity = capacity;
}

PG_FUNCTION_INFO_V1(pgad_pack_step);

/* The transition function: (state internal, VARIADIC "any" of float8) → state. */
Datum
pgad_pack_step(PG_FUNCTION_ARGS)
{
	MemoryContext context;
	PackState  *state = PG_ARGISNULL(0) ? NULL : (PackState *) PG_GETARG_POINTER(0);
	int			columns = PG_NARGS() - 1;
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
		state = pack_new(columns, PACK_FIRST_ROWS, context);
	}
	for (k = 1; k <= columns; k++)
		if (PG_ARGISNULL(k))
		{
			state->skipped++;
			PG_RETURN_POINTER(state);
		}
	if (state->rows == state->capacity)
		pack_reserve(state, state->rows + 1);
	for (k = 0; k < columns; k++)
		state->values[k * state->capacity + state->rows] = PG_GETARG_FLOAT8(k + 1);
	state->rows++;
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
	int			k;

	if (!AggCheckCallContext(fcinfo, &context))
		elog(ERROR, "pgad_pack_combine called in non-aggregate context");
	if (state2 == NULL)
	{
		if (state1 == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(state1);
	}
	if (state1 == NULL)
		state1 = pack_new(state2->columns, state2->rows, context);
	if (state1->columns != state2->columns)
		elog(ERROR, "pgad.pack combining states of %d and %d columns", state1->columns, state2->columns);
	pack_reserve(state1, state1->rows + state2->rows);
	for (k = 0; k < state1->columns; k++)
		memcpy(state1->values + k * state1->capacity + state1->rows, state2->values + k * state2->capacity,
			   sizeof(float8) * state2->rows);
	state1->rows += state2->rows;
	state1->skipped += state2->skipped;
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
	PackState  *state = (PackState *) PG_GETARG_POINTER(0);
	Size		size = VARHDRSZ + sizeof(PackHeader) + sizeof(float8) * state->columns * state->rows;
	bytea	   *result = palloc(size);
	PackHeader	header = {PACK_MAGIC, (uint32) state->columns, state->rows, state->skipped};
	char	   *out = VARDATA(result) + sizeof(PackHeader);
	int			k;

	SET_VARSIZE(result, size);
	memcpy(VARDATA(result), &header, sizeof(PackHeader));
	for (k = 0; k < state->columns; k++)
		memcpy(out + sizeof(float8) * state->rows * k, state->values + k * state->capacity,
			   sizeof(float8) * state->rows);
	PG_RETURN_BYTEA_P(result);
}

PG_FUNCTION_INFO_V1(pgad_pack_deserialize);

/* The deserial function: (bytea, internal) → the state the bytea holds, in the current memory context. */
Datum
pgad_pack_deserialize(PG_FUNCTION_ARGS)
{
	bytea	   *bytes = PG_GETARG_BYTEA_PP(0);
	Size		size = VARSIZE_ANY_EXHDR(bytes);
	PackHeader	header;
	PackState  *state;
	int			k;

	if (!AggCheckCallContext(fcinfo, NULL))
		elog(ERROR, "pgad_pack_deserialize called in non-aggregate context");
	if (size < sizeof(PackHeader))
		elog(ERROR, "pgad.pack state of %zu bytes, shorter than its header", size);
	memcpy(&header, VARDATA_ANY(bytes), sizeof(PackHeader));
	if (header.magic != PACK_MAGIC || header.columns < 1 || header.columns >= FUNC_MAX_ARGS ||
		header.rows < 0 || header.skipped < 0 || header.rows > pack_max_rows(header.columns) ||
		size != sizeof(PackHeader) + sizeof(float8) * header.columns * header.rows)
		elog(ERROR, "invalid pgad.pack state");
	state = pack_new(header.columns, header.rows, CurrentMemoryContext);
	state->rows = header.rows;
	state->skipped = header.skipped;
	for (k = 0; k < state->columns; k++)
		memcpy(state->values + k * state->capacity,
			   VARDATA_ANY(bytes) + sizeof(PackHeader) + sizeof(float8) * header.rows * k,
			   sizeof(float8) * header.rows);
	PG_RETURN_POINTER(state);
}
