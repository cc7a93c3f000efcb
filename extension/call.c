/*
 * call.c: the door from SQL into Python (pgad_call). Every public function pgad.f is a C function that calls its
 * PL/Python implementation pgad._f, found by name and argument types in pgad's own schema, never through the caller's
 * search_path. A call made from C is not subject to the EXECUTE check, so the implementations are not executable by
 * PUBLIC while the public functions keep running as the caller (SECURITY INVOKER), with the caller's privileges on the
 * data. An error the implementation raises on purpose (plpy.Error, or a server error passed through, a cancel among
 * them) leaves as the server's own: PL/Python's "plpy.Error: " prefix and the Python traceback dropped, the SQLSTATE,
 * DETAIL and HINT kept. Any other Python exception, a bug, keeps its traceback. An error that points into the lambda (a
 * syntax error) also carries the lambda as its internal query and the place as its position, which psql shows as
 * PostgreSQL's own syntax errors, a caret under the place: plpy.error cannot set them, so pgad's Python leaves them
 * here first (pgad_error_query, at the end of this file: one of the doors from pgad's Python back into the server that
 * module.c describes). The aggregates' C functions (aggregates.c) call their own implementations the same way
 * (pgad_implementation_of, pgad_call_plainly).
 */
#include "postgres.h"

#include <string.h>

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "pgad.h"

/* The oid of function name(argtypes) in schema namespace: pgad's own functions, never found on a search_path. */
Oid
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
Oid
pgad_implementation_of(Oid fn, const char *prefix, const char *suffix, const oidvector *argtypes)
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
Datum
pgad_call_plainly(FunctionCallInfo call)
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
		fmgr_info_cxt(pgad_implementation_of(fcinfo->flinfo->fn_oid, "_", "", any ? types : NULL),
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
	result = pgad_call_plainly(call);
	fcinfo->isnull = call->isnull;
	return result;
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
