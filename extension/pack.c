/*
 * pack.c: the packing aggregate pgad.pack, which turns rows into numpy's columns at about the cost of a scan (a
 * PL/Python transition function would cost a microsecond a row), and its packed state, PackState, which the aggregates
 * (aggregates.c) pack their rows into too and the native load (load.c) hands on.
 *
 * pgad.pack(VARIADIC "any"): the aggregate every loader query runs. It appends each row's float8 values to one native
 * float8 array per column (structure of arrays), skipping and counting rows with a NULL, and gives a bytea that numpy
 * reads in place: a PackHeader, then each column's values, column after column. The state grows by doubling in the
 * aggregate's memory context, so a row costs no allocation beyond that amortised growth. PARALLEL SAFE: the serial form
 * is the same bytea, and combining two states appends the second's rows. The bytea is at most 1 GB, PostgreSQL's limit
 * on a value: a state that would pass it stops with SQLSTATE 54000 as soon as it does, and the loader then packs the
 * rows a chunk at a time (pgad/loader.py).
 *
 * A call holds its data's packed bytes about PACK_COPIES times over at its peak (measured: docs/security.md): while the
 * query that packs them ends, the state (up to twice the rows, for the doubling), the bytea it gives and the copy of
 * that in the query's result; later the Python bytes (numpy reads them in place), a standardised copy and the shuffled
 * copies of a mini-batch optimizer. So that a call stays within pgad.memory_limit, a state holds at most
 * pgad.memory_limit / PACK_COPIES of packed bytes, and what pgad.pack's states in one query (every group's, every
 * chunk's) are charged together stays within the limit: each state its rows PACK_COPIES times over or the room it has
 * reserved, whichever is more, and PACK_STATE_BYTES for itself and what one more group costs the rest of the call (the
 * group's row in the query's result, its Python objects: measured, docs/security.md), the first state's excepted. The
 * row or the group past the limit stops the query with SQLSTATE 53200 before anything grows. Each parallel worker
 * counts its own states, and the leader its own and those it combines; the loader gives the error its final form, with
 * the data's own size (pgad/loader.py).
 */
#include "postgres.h"

#include <string.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "pgad.h"

#define PACK_MAGIC		0x4b504750	/* "PGPK", as the first four bytes read on a little-endian machine */
#define PACK_FIRST_ROWS 16

/* The most rows whose bytea stays within MaxAllocSize. */
static int64
pack_max_rows(int columns)
{
	if (columns == 0)			/* a lambda that reads no column (pgad.loss_agg: aggregates.c) */
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
int64
pgad_pack_limit_rows(int columns)
{
	if (columns == 0)
		return PG_INT64_MAX / 2;
	return (int64) pgad_memory_limit_kb * 1024 / (PACK_COPIES * sizeof(float8) * columns);
}

/* "2.5 MB", "640 MB": bytes as the memory limit's messages give them (pgad/loader.py's megabytes). */
static char *
megabytes(double bytes)
{
	double		mb = bytes / (1024.0 * 1024.0);

	return mb < 10 ? psprintf("%.1f MB", mb) : psprintf("%.0f MB", mb);
}

void
pgad_pack_over_limit(int64 rows, int columns)
{
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(pgad_memory_limit_kb * 1024.0)),
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
 * past what pgad.memory_limit lets one state hold, or past 1 GB). pgad_pack_reserve grows the array to that: in place
 * where it can (repalloc of a large chunk is realloc, which moves the pages rather than copying them), the columns
 * after the first moving up to their new places, the last first.
 */
int64
pgad_pack_room(const PackState *state, int64 rows)
{
	int64		max_rows = pack_max_rows(state->columns);
	int64		capacity = state->capacity;

	if (rows <= capacity)
		return capacity;
	if (rows > pgad_pack_limit_rows(state->columns))
		pgad_pack_over_limit(rows, state->columns);
	if (rows > max_rows)
		pack_too_large(max_rows, state->columns);
	max_rows = Min(max_rows, pgad_pack_limit_rows(state->columns));
	while (capacity < rows)
		capacity = Min(capacity * 2, max_rows);
	return capacity;
}

/* Room for at least rows rows, as pgad_pack_room gives it. */
void
pgad_pack_reserve(PackState *state, int64 rows)
{
	int64		capacity = pgad_pack_room(state, rows);
	int			k;

	if (capacity == state->capacity)
		return;
	state->values = repalloc(state->values, sizeof(float8) * state->columns * capacity);
	for (k = state->columns - 1; k > 0; k--)
		memmove(state->values + k * capacity, state->values + k * state->capacity, sizeof(float8) * state->rows);
	state->capacity = capacity;
}

/* into with from's rows appended. */
void
pgad_pack_append(PackState *into, const PackState *from)
{
	int			k;

	if (into->columns != from->columns)
		elog(ERROR, "pgad.pack combining states of %d and %d columns", into->columns, from->columns);
	pgad_pack_reserve(into, into->rows + from->rows);
	for (k = 0; k < into->columns; k++)
		memcpy(into->values + k * into->capacity + into->rows, from->values + k * from->capacity,
			   sizeof(float8) * from->rows);
	into->rows += from->rows;
	into->skipped += from->skipped;
}

/* A copy of state in context. */
PackState *
pgad_pack_copy(const PackState *state, MemoryContext context)
{
	PackState  *copy = pack_new(state->columns, state->rows, context);

	pgad_pack_append(copy, state);
	return copy;
}

/* A new state, with room for a first few rows (fewer where pgad.memory_limit allows fewer), in context. */
PackState *
pgad_pack_first(int columns, MemoryContext context)
{
	return pack_new(columns, Min(PACK_FIRST_ROWS, pgad_pack_limit_rows(columns)), context);
}

/* New charges for an aggregate's states. */
PackCharges *
pgad_pack_charges(MemoryContext context)
{
	PackCharges *charges = MemoryContextAllocZero(context, sizeof(PackCharges));

	charges->charged = -PACK_STATE_BYTES;
	return charges;
}

/* pgad.pack's charges, in the fn_extra of the aggregate call fcinfo is of. */
PackCharges *
pgad_pack_charges_of(FunctionCallInfo fcinfo)
{
	if (fcinfo->flinfo->fn_extra == NULL)
		fcinfo->flinfo->fn_extra = pgad_pack_charges(fcinfo->flinfo->fn_mcxt);
	return (PackCharges *) fcinfo->flinfo->fn_extra;
}

/* The error once the states of an aggregate are charged more than pgad.memory_limit (kept: pgad.pack's). */
static void
pack_over_charged(const PackCharges *charges, int columns, bool kept)
{
	if (kept)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(pgad_memory_limit_kb * 1024.0)),
				 errdetail("Packing stopped at row " INT64_FORMAT " of %d columns, in group " INT64_FORMAT ": a group "
						   "costs %d bytes besides its rows, 8 bytes a value held up to %d times over while a call "
						   "loads and trains.", charges->rows, columns, charges->states, PACK_STATE_BYTES,
						   PACK_COPIES),
				 errhint("Train on fewer groups or a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), "
						 "or have a superuser raise pgad.memory_limit.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("the data needs more than pgad.memory_limit (%s)", megabytes(pgad_memory_limit_kb * 1024.0)),
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
void
pgad_pack_charge(PackCharges *charges, int64 *charged, int64 cost, int columns, bool kept)
{
	charges->charged += cost - *charged;
	*charged = cost;
	if (charges->charged > (int64) pgad_memory_limit_kb * 1024)
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
	pgad_pack_charge(charges, &state->charged,
					 pack_cost(state->columns, rows, pgad_pack_room(state, rows), PACK_COPIES), state->columns, true);
}

/* The bytes pgad_pack_write writes: PackHeader, then each column's rows. */
Size
pgad_pack_size(const PackState *state)
{
	return sizeof(PackHeader) + sizeof(float8) * state->columns * state->rows;
}

/* more_skipped is added to the header's count of rows skipped (the aggregates' rows that were NULL as a whole). */
void
pgad_pack_write(const PackState *state, int64 more_skipped, char *out)
{
	PackHeader	header = {PACK_MAGIC, (uint32) state->columns, state->rows, state->skipped + more_skipped};
	int			k;

	memcpy(out, &header, sizeof(PackHeader));
	out += sizeof(PackHeader);
	for (k = 0; k < state->columns; k++)
		memcpy(out + sizeof(float8) * state->rows * k, state->values + k * state->capacity,
			   sizeof(float8) * state->rows);
}

/* pgad_pack_write's bytes as a bytea. */
bytea *
pgad_pack_bytea(const PackState *state, int64 more_skipped)
{
	Size		size = VARHDRSZ + pgad_pack_size(state);
	bytea	   *result = palloc(size);

	SET_VARSIZE(result, size);
	pgad_pack_write(state, more_skipped, VARDATA(result));
	return result;
}

/* The state that the first size bytes at data begin with (pgad_pack_write's bytes; more may follow), in context. */
PackState *
pgad_pack_read(const char *data, Size size, MemoryContext context)
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
		state = pgad_pack_first(columns, context);
		pack_charge_rows(pgad_pack_charges_of(fcinfo), state, 0);
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
	pack_charge_rows(pgad_pack_charges_of(fcinfo), state, state->rows + 1);
	pgad_pack_add_row(state, values);
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
		pack_charge_rows(pgad_pack_charges_of(fcinfo), state1, 0);
	}
	pack_charge_rows(pgad_pack_charges_of(fcinfo), state1, state1->rows + state2->rows);
	pgad_pack_append(state1, state2);
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
	PG_RETURN_BYTEA_P(pgad_pack_bytea((PackState *) PG_GETARG_POINTER(0), 0));
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
	state = pgad_pack_read(VARDATA_ANY(bytes), size, CurrentMemoryContext);
	if (pgad_pack_size(state) != size)
		elog(ERROR, "invalid pgad.pack state");
	PG_RETURN_POINTER(state);
}
