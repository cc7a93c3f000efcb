/*
 * aggregates.c: the aggregates pgad.loss_agg, pgad.gradient_agg and
 * pgad.gradient_descent_agg(loss, weights, row[, options]), whose row argument is a whole-row reference of the data.
 * The transition function packs, as pgad.pack does, the values of the columns the lambda reads, converted to float8 as
 * a cast would convert them. Which columns those are is the parser's business: at a query's first row, and again when
 * the lambda or the row type changes, it asks pgad._lambda_columns (PL/Python, no queries; it runs in parallel workers
 * too), which checks them with the functions' own errors. The state holds the group's packed rows, its loss, weights
 * and options (the same in every row of the group), and serialises to bytes that carry all of them, so partial states
 * cross from parallel workers. The final function hands the packed columns to the PL/Python implementation
 * pgad._<aggregate> (api.py), which differentiates, compiles and trains as the functions do.
 */
#include "postgres.h"

#include <string.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "nodes/primnodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/typcache.h"

#include "pgad.h"

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
	result = pgad_call_plainly(call);
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
 * weights and options, and the room of its rows. The aggregates train one group at a time, so a group's rows count once
 * (each group alone must fit PACK_COPIES times over, as pgad_pack_room checks); but every group that the query holds at
 * once (all of them, when it groups by hashing) holds its state, so what they are charged together must fit.
 */
static int64
lambda_cost(const LambdaState *state, int64 rows)
{
	int64		cost = PACK_STATE_BYTES + VARSIZE_ANY(state->loss) + VARSIZE_ANY(state->weights) +
		(state->options == NULL ? 0 : VARSIZE_ANY(state->options));

	if (state->pack != NULL)
		cost += (int64) sizeof(float8) * state->pack->columns * pgad_pack_room(state->pack, rows);
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
	pgad_pack_charge(state->charges, &state->charged, lambda_cost(state, rows),
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
		extra->charges = pgad_pack_charges(fcinfo->flinfo->fn_mcxt);
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
		state->pack = pgad_pack_first(reader->columns, context);
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
	pgad_pack_add_row(state->pack, reader->values);
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
		copy->pack = pgad_pack_copy(state->pack, context);
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
		lambda_charge_new(state1, pgad_pack_charges_of(fcinfo), context);
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
		state1->pack = pgad_pack_copy(state2->pack, context);
		state1->names = (ArrayType *) varlena_copy((struct varlena *) state2->names, context);
		if (state1->charges != NULL)
			state1->charges->rows += state1->pack->rows;
		lambda_charge(state1, state1->pack->rows);
	}
	else if (state2->pack != NULL)
	{
		lambda_charge(state1, state1->pack->rows + state2->pack->rows);
		pgad_pack_append(state1->pack, state2->pack);
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
		size += pgad_pack_size(state->pack) + varlena_size((struct varlena *) state->names);
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
		pgad_pack_write(state->pack, 0, out);
		out = varlena_write((struct varlena *) state->names, out + pgad_pack_size(state->pack));
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
		state->pack = pgad_pack_read(in, end - in, CurrentMemoryContext);
		in += pgad_pack_size(state->pack);
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
 * loss text, weights jsonb, options jsonb). Its packed bytea is, when rows were packed, a reference to the rows
 * copied once into a native load (pgad_load_reference, load.c), which numpy wraps as the functions' data is wrapped:
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
		pgad_load_reference(state->pack, state->null_rows) :
		pgad_pack_bytea(state->pack != NULL ? state->pack : &nothing, state->null_rows);
	Datum		result;

	LOCAL_FCINFO(call, 5);

	if (implementation == NULL)
	{
		Oid			argtypes[5] = {BYTEAOID, TEXTARRAYOID, TEXTOID, JSONBOID, JSONBOID};

		implementation = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(FmgrInfo));
		fmgr_info_cxt(pgad_implementation_of(fcinfo->flinfo->fn_oid, "", "_final", buildoidvector(argtypes, 5)),
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
	result = pgad_call_plainly(call);
	fcinfo->isnull = call->isnull;
	return result;
}
