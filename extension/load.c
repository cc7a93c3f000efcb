/*
 * load.c: the native load (pgad_load), which the loader (pgad/loader.py) calls with ctypes in place of pgad.pack's
 * query: the loader's query, SELECT x::pg_catalog.float8 AS c0, … FROM (<data>) AS pgad_data, an array column as
 * pg_catalog.float8[], runs through SPI with a DestReceiver of its own that appends each row's float8 values straight
 * into one array per column: no aggregate state that doubles and moves, no bytea, no SPI result tuple, no Python bytes.
 * An array column's elements become columns of their own, as the loader asks (the element index of each column, and the
 * length the lambda was built for: loader.lengths measured it), and a NULL array or a NULL element skips the row, as a
 * NULL number does.
 *
 * The receiver trusts nothing that Python or an earlier query established about the rows: the loader measured the
 * arrays' lengths with a query of its own, and a data query that is volatile (random(), a sequence, a function) can
 * give other rows when it runs again here. So every row's array is checked, in C, on the row that is read: one
 * dimension, from index 1, of the length the lambda was built for, of double precision; a row that is not is SQLSTATE
 * 2202E (42804 for the type), whose message names the column (the loader aliases an array column by its name in the
 * data) and the row, as loader.lengths names it. The plan's columns are checked against the types the load asks for
 * before the first row, and the load's own arguments too.
 *
 * Each column is one anonymous mmap, grown by mremap(MREMAP_MAYMOVE), which moves the pages rather than copying them,
 * and handed to Python: numpy wraps it without a copy (pgad/loader.py's Mapped), and the last numpy view to go frees it
 * (pgad_load_free_column). Until Python claims a load (pgad_load_claim), it is kept in a list that the end of the
 * transaction frees, so that nothing leaks if Python fails in between.
 *
 * The plan is serial (cursorOptions 0: no CURSOR_OPT_PARALLEL_OK) unless asked otherwise, so the rows come in the same
 * order every time: measured (docs/design.md), allowing parallel workers changed nothing on a table scan (the planner
 * chose the serial plan), and a parallel plan forced on it gained a few percent with an idle core and lost 1.6 times
 * with a busy one, since the leader still receives and appends every row. Errors never cross Python's frames: the query
 * runs in a subtransaction, as PL/Python's plpy.execute runs one (plpy_spi.c), and an error it raises, a cancel or a
 * statement_timeout among them, is caught, the subtransaction rolled back, the columns freed, and the error's SQLSTATE,
 * message, detail and hint (and context) handed back for Python to raise as plpy.execute would have. pgad.memory_limit
 * stops the load at the row that passes it, before anything grows, with pgad.pack's error (53200: PACK_COPIES times the
 * packed bytes, as pgad.pack counts them).
 *
 * A key column (indexes[k] == PGAD_LOAD_KEY: a keyed weight's, pgad/keyed.py) is read as pg_catalog.text, and each
 * row's text is looked up in the column's hash (keys.c): a key not seen before gets the next code, 1, 2, … in the
 * order the rows show them, and the code is appended as the row's float8, as a number is; a NULL key skips the row. A
 * row skipped for a NULL elsewhere adds no key, so every key has a row. The keys' text stays with the load (its keys
 * context) for Python to read once the query is done (PgadLoad's keys), until pgad_load_done; their cost
 * (pgad_keys_cost) counts against pgad.memory_limit with the rows', and a key past it stops the load with the keys'
 * own error (53200), which names the column. So the keys are found in the same pass as the rows are loaded, at scan
 * speed, with no query of their own and no literal of them all in the loader's query.
 *
 * The aggregates' final function (aggregates.c) hands its state's rows to Python the same way: copied once into a load,
 * which a small bytea names (pgad_load_reference), rather than into a bytea that PL/Python copies again.
 */
#include "postgres.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "pgad.h"

#define LOAD_FIRST_BYTES ((Size) 64 * 1024)	/* each column's first mapping */

/* The loads that Python has not claimed yet: freed at the end of the transaction. */
static PgadLoad *unclaimed_loads = NULL;
static uint64 last_load_id = 0;

#define LOAD_MAGIC		0x4c504750	/* "PGPL": pgad_load_reference's bytea, where pgad.pack's has "PGPK" */

/* The DestReceiver: each row's values appended to the load's columns. */
typedef struct LoadReceiver
{
	DestReceiver pub;
	PgadLoad   *load;
	const int  *attributes;		/* per column: the query's column it reads (0-based) */
	const int  *indexes;		/* per column: 0 for a number, the element (1-based) of an array, or PGAD_LOAD_KEY */
	const int  *lengths;		/* per column: 0 for a number, the length of the array it is an element of */
	int			natts;			/* the query's columns */
	int		   *widths;			/* per query column: -1 when no column reads it, 0 a number, else arrays' length */
	const char **names;			/* per query column: its name (an array column's, in the data) */
	const float8 **elements;	/* per query column: one row's array elements */
	PgadKeyHash **hashes;		/* per query column: a key column's hash of its keys, else NULL */
	text	  **row_keys;		/* per query column: one row's key */
	float8	   *codes;			/* per column: one row's code of its key */
	int64		limit_rows;		/* the most rows pgad.memory_limit lets the load hold */
	int64		limit_bytes;	/* pgad.memory_limit */
	int64		keys_charged;	/* what every key column's keys cost (pgad_keys_cost) */
	MemoryContext row_context;	/* a row's detoasted arrays and keys, reset after each row */
	MemoryContext keys_work;	/* the hashes' lookups (keys.c), freed with the query */
} LoadReceiver;

/* The load's keys, freed (once Python has read them, or when the load fails). */
static void
load_free_keys(PgadLoad *load)
{
	if (load->keys_context != NULL)
		MemoryContextDelete(load->keys_context);
	load->keys_context = NULL;
	load->keys = NULL;
}

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
 * finaliser), and the others, if any, are freed now, as are the keys (Python has its own copy of them).
 */
void
pgad_load_done(PgadLoad *load, int wrapped)
{
	load_free_columns(load, Max(wrapped, 0));
	load_free_keys(load);
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

/* From _PG_init: the end of every transaction frees the loads Python never claimed. */
void
pgad_load_init(void)
{
	RegisterXactCallback(load_xact_callback, NULL);
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
 * Before the first row: the query's columns that the load reads, of the types it reads them as (float8, float8[]
 * for an array's elements, text for a key column), each element within the one length its array column is read at,
 * and a key column read by one column of the load only; each key column gets its hash.
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
	receiver->hashes = palloc0(sizeof(PgadKeyHash *) * Max(typeinfo->natts, 1));
	receiver->row_keys = palloc0(sizeof(text *) * Max(typeinfo->natts, 1));
	receiver->codes = palloc0(sizeof(float8) * Max(receiver->load->columns, 1));
	for (k = 0; k < typeinfo->natts; k++)
	{
		receiver->widths[k] = -1;
		receiver->names[k] = pstrdup(NameStr(TupleDescAttr(typeinfo, k)->attname));
	}
	for (k = 0; k < receiver->load->columns; k++)
	{
		int			a = receiver->attributes[k];
		int			index = receiver->indexes[k];
		bool		key = index == PGAD_LOAD_KEY;
		int			width = index > 0 ? receiver->lengths[k] : 0;
		Oid			expected = key ? TEXTOID : index > 0 ? FLOAT8ARRAYOID : FLOAT8OID;

		if (a < 0 || a >= typeinfo->natts)
			load_misread(k, psprintf("the query has %d columns, not %d", typeinfo->natts, a + 1));
		if (TupleDescAttr(typeinfo, a)->atttypid != expected)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of pgad's load is of type %s, not %s", receiver->names[a],
							format_type_be(TupleDescAttr(typeinfo, a)->atttypid), format_type_be(expected))));
		if (key)
		{
			if (receiver->widths[a] >= 0 || receiver->load->keys_context == NULL)
				load_misread(k, "a key column read twice, or with no room for its keys");
			receiver->hashes[a] = pgad_keys_create(receiver->load->keys_context, receiver->keys_work);
			receiver->widths[a] = 0;
			continue;
		}
		if (index < 0 || index > width)
			load_misread(k, psprintf("element %d of arrays of %d", index, width));
		if (receiver->widths[a] >= 0 && (receiver->widths[a] != width || receiver->hashes[a] != NULL))
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

/* "2.5 MB", "640 MB", as pack.c's messages give bytes (and pgad/loader.py's megabytes). */
static char *
load_megabytes(double bytes)
{
	double		mb = bytes / (1024.0 * 1024.0);

	return mb < 10 ? psprintf("%.1f MB", mb) : psprintf("%.0f MB", mb);
}

/*
 * The error for a key column's new key that pgad.memory_limit has no room for: keys charged is what the keys of
 * every key column cost with it, rows_bytes what the rows cost with this one.
 */
static void
load_keys_over_limit(LoadReceiver *receiver, int a, int64 count, int64 rows_bytes, int64 keys_charged)
{
	PgadLoad   *load = receiver->load;

	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("the keys of column \"%s\" need %s with the rows, more than pgad.memory_limit (%s)",
					receiver->names[a], load_megabytes((double) rows_bytes + keys_charged),
					load_megabytes(receiver->limit_bytes)),
			 errdetail("Loading stopped at row " INT64_FORMAT ", the column's key " INT64_FORMAT ": the keys take %s "
					   "(each key's text twice and %d bytes), the rows %s (%d columns, 8 bytes a value, held up to %d "
					   "times over).", load->rows + load->skipped + 1, count, load_megabytes(keys_charged),
					   PGAD_KEY_BYTES, load_megabytes(rows_bytes), load->columns, PACK_COPIES),
			 errhint("Group rare keys into one in the data query, train on a sample of the data, or have a superuser "
					 "raise pgad.memory_limit.")));
}

/*
 * One row: its values appended to the columns, a key column's key as its code (a new key added to the column's hash
 * first, within pgad.memory_limit); a row with a NULL (a number, a key, an array or an element) skipped and counted;
 * an array of another shape than the lambda reads, the error (pgad_odd_array).
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
		if (receiver->widths[a] == 0 && receiver->hashes[a] == NULL)
			continue;
		if (outer == NULL)
			outer = MemoryContextSwitchTo(receiver->row_context);
		if (receiver->hashes[a] != NULL)
		{
			receiver->row_keys[a] = DatumGetTextPP(slot->tts_values[a]);
			continue;
		}
		array = DatumGetArrayTypeP(slot->tts_values[a]);
		if (ARR_ELEMTYPE(array) != FLOAT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of pgad's load holds an array of type %s, not double precision",
							receiver->names[a], format_type_be(ARR_ELEMTYPE(array)))));
		if (ARR_NDIM(array) != 1 || ARR_LBOUND(array)[0] != 1 || ARR_DIMS(array)[0] != receiver->widths[a])
			pgad_odd_array(receiver->names[a], load->rows + load->skipped + 1, array, receiver->widths[a]);
		if (array_contains_nulls(array))
		{
			load->skipped++;
			goto done;
		}
		receiver->elements[a] = (const float8 *) ARR_DATA_PTR(array);
	}
	if (row + 1 > receiver->limit_rows)
		pgad_pack_over_limit(row + 1, load->columns);
	for (k = 0; k < load->columns; k++)
	{
		const char *key;
		int			len;
		int64		code;

		if (receiver->indexes[k] != PGAD_LOAD_KEY)
			continue;
		a = receiver->attributes[k];
		key = VARDATA_ANY(receiver->row_keys[a]);
		len = VARSIZE_ANY_EXHDR(receiver->row_keys[a]);
		code = pgad_keys_find(receiver->hashes[a], key, len);
		if (code == 0)
		{
			int64		rows_bytes = (row + 1) * load->columns * (int64) (sizeof(float8) * PACK_COPIES);
			int64		charged = receiver->keys_charged + pgad_keys_cost(len);

			if (rows_bytes + charged > receiver->limit_bytes)
				load_keys_over_limit(receiver, a, pgad_keys_count(receiver->hashes[a]) + 1, rows_bytes, charged);
			code = pgad_keys_add(receiver->hashes[a], key, len);
			receiver->keys_charged = charged;
		}
		receiver->codes[k] = (float8) code;
	}
	if ((row + 1) * load->columns * (int64) (sizeof(float8) * PACK_COPIES) + receiver->keys_charged >
		receiver->limit_bytes)
		pgad_pack_over_limit(row + 1, load->columns);
	if (row == (int64) (load->mapped / sizeof(float8)))
		load_grow(receiver);
	for (k = 0; k < load->columns; k++)
	{
		int			index = receiver->indexes[k];

		a = receiver->attributes[k];
		if (index == 0)
			load->values[k][row] = DatumGetFloat8(slot->tts_values[a]);
		else if (index == PGAD_LOAD_KEY)
			load->values[k][row] = receiver->codes[k];
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
		int			k;

		/* The keys' text outlives the query, until Python is done with the load (pgad_load_done). */
		for (k = 0; k < load->columns && load->keys_context == NULL; k++)
			if (indexes[k] == PGAD_LOAD_KEY)
			{
				load->keys_context = AllocSetContextCreate(TopMemoryContext, "pgad load keys",
														   ALLOCSET_DEFAULT_SIZES);
				load->keys = MemoryContextAllocZero(load->keys_context, sizeof(PgadKeys) * load->columns);
			}
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
		receiver.limit_rows = pgad_pack_limit_rows(load->columns);
		receiver.limit_bytes = (int64) pgad_memory_limit_kb * 1024;
		receiver.row_context = AllocSetContextCreate(CurrentMemoryContext, "pgad load row", ALLOCSET_SMALL_SIZES);
		receiver.keys_work = AllocSetContextCreate(CurrentMemoryContext, "pgad load key hash", ALLOCSET_DEFAULT_SIZES);
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
		/* Each key column's keys, kept for Python before their hash goes with SPI's context. */
		for (k = 0; k < load->columns && receiver.hashes != NULL; k++)
			if (indexes[k] == PGAD_LOAD_KEY)
				pgad_keys_give(receiver.hashes[attributes[k]], &load->keys[k]);
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
		load_free_keys(load);
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
 * indexes[k] > 0, or a key column, text coded by its keys, when indexes[k] is PGAD_LOAD_KEY (its keys then in the
 * load's keys[k]); parallel lets the planner choose parallel workers. The load, with its columns or its error
 * (sqlerrcode), or NULL when there is no memory even for that. Python claims it at once (pgad_load_claim), reads
 * it and says when it is done (pgad_load_done). Nothing here throws across Python's frames.
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
bytea *
pgad_load_reference(const PackState *pack, int64 more_skipped)
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
