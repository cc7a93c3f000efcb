/*
 * pgad.c: the native part of pgad, loaded into every backend that calls a pgad function.
 *
 * Two small jobs that Python cannot do from inside PL/Python:
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
 */
#include "postgres.h"

#include <limits.h>
#include <string.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
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
