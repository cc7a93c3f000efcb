/*
 * pgad.h: what the files of pgad.so share. pgad.so, the native part of pgad, is loaded into every backend that
 * calls a pgad function; it does what Python cannot do from inside PL/Python, or not fast enough, one job a file
 * (pgxs.mk's OBJS):
 *
 *   module.c      PG_MODULE_MAGIC and _PG_init: pgad's settings; pgad_setting and pgad_check_interrupts, two doors
 *                 from pgad's Python back into the server that run no query
 *   call.c        the door from SQL into Python (pgad_call), and the way back of an error pgad raises on purpose
 *                 (pgad_error_query, the third such door)
 *   pack.c        the packing aggregate pgad.pack, and the packed state (PackState) that the other files build on
 *   element.c     pgad._element, which pgad.pack's queries read an array column's elements with
 *   aggregates.c  the aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg
 *   load.c        the native load (pgad_load), which the loader runs the functions' data query with
 *   keys.c        a key column's keys, found in the native load's pass: a hash of each key's text to its code
 *   reads.c       the relations a training read (pgad_reads), which its model's read_from records
 *
 * Each file's own header says what it does and why. What one file alone uses is static there; what the others use
 * is declared here, its name prefixed pgad_ (PostgreSQL loads pgad.so with RTLD_GLOBAL, among every other module's
 * symbols). The functions pgad's Python calls with ctypes, by name among the backend's symbols (pgad/server.py,
 * pgad/loader.py, pgad/models/catalog.py), are PGDLLEXPORT.
 */
#ifndef PGAD_H
#define PGAD_H

#include "fmgr.h"
#include "utils/array.h"

/* module.c: pgad's settings, and two doors from pgad's Python back into the server */

extern int	pgad_memory_limit_kb;	/* pgad.memory_limit, in kB */

extern PGDLLEXPORT int pgad_check_interrupts(char *sqlstate, char *message, int size);
extern PGDLLEXPORT char *pgad_setting(const char *name);

/* call.c: the door from SQL into Python, which the aggregates' C functions call their implementations through too */

extern Oid	pgad_function(const char *name, const oidvector *argtypes, Oid namespace);
extern Oid	pgad_implementation_of(Oid fn, const char *prefix, const char *suffix, const oidvector *argtypes);
extern Datum pgad_call_plainly(FunctionCallInfo call);

extern PGDLLEXPORT int pgad_error_query(const char *query, int position);

/* pack.c: the packing aggregate pgad.pack, and its packed state (pack.c says how memory is charged) */

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

extern int64 pgad_pack_limit_rows(int columns);
extern void pgad_pack_over_limit(int64 rows, int columns);
extern int64 pgad_pack_room(const PackState *state, int64 rows);
extern void pgad_pack_reserve(PackState *state, int64 rows);
extern void pgad_pack_append(PackState *into, const PackState *from);
extern PackState *pgad_pack_copy(const PackState *state, MemoryContext context);
extern PackState *pgad_pack_first(int columns, MemoryContext context);
extern PackCharges *pgad_pack_charges(MemoryContext context);
extern PackCharges *pgad_pack_charges_of(FunctionCallInfo fcinfo);
extern void pgad_pack_charge(PackCharges *charges, int64 *charged, int64 cost, int columns, bool kept);
extern Size pgad_pack_size(const PackState *state);
extern void pgad_pack_write(const PackState *state, int64 more_skipped, char *out);
extern bytea *pgad_pack_bytea(const PackState *state, int64 more_skipped);
extern PackState *pgad_pack_read(const char *data, Size size, MemoryContext context);

/* One row appended: values[k] to column k. (Here, inline, for the transition functions of pack.c and aggregates.c.) */
static inline void
pgad_pack_add_row(PackState *state, const float8 *values)
{
	int			k;

	if (state->rows == state->capacity)
		pgad_pack_reserve(state, state->rows + 1);
	for (k = 0; k < state->columns; k++)
		state->values[k * state->capacity + state->rows] = values[k];
	state->rows++;
}

/* element.c: the element reader, and the error for an array of another shape than the lambda reads */

extern void pgad_odd_array(const char *name, int64 row, ArrayType *array, int width) pg_attribute_noreturn();

/* load.c: the native load */

/*
 * A key column's keys, as Python reads them (pgad/loader.py's KeysResult): codes 1 … count, each key's text UTF-8
 * and followed by a NUL, in code order.
 */
typedef struct PgadKeys
{
	int64		count;			/* keys */
	int64		bytes;			/* bytes of text */
	char	   *text;			/* NULL for a column that is no key column */
} PgadKeys;

/* indexes[k] of a key column (pgad_load): its text looked up in its hash (keys.c), the code appended */
#define PGAD_LOAD_KEY (-1)

/* What a load gives Python; pgad/loader.py's LoadResult mirrors the fields up to keys. */
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
	PgadKeys   *keys;			/* per column, its keys; NULL where no column is a key column, and once done */
	/* Not seen by Python: */
	MemoryContext keys_context; /* keys and their text (keys.c), freed by pgad_load_done or a failed load */
	Size		mapped;			/* bytes each column's mapping has */
	int			references;		/* Python's reader, and each column not yet freed */
	uint64		id;				/* how pgad_load_reference's bytea names it */
	struct PgadLoad *next;		/* in load.c's unclaimed_loads */
} PgadLoad;

extern void pgad_load_init(void);
extern bytea *pgad_load_reference(const PackState *pack, int64 more_skipped);

extern PGDLLEXPORT PgadLoad *pgad_load(const char *query, int columns, const int *attributes, const int *indexes,
									   const int *lengths, int parallel);
extern PGDLLEXPORT void pgad_load_claim(PgadLoad *load);
extern PGDLLEXPORT void pgad_load_free_column(PgadLoad *load, int column);
extern PGDLLEXPORT void pgad_load_done(PgadLoad *load, int wrapped);
extern PGDLLEXPORT int pgad_load_unclaimed(void);
extern PGDLLEXPORT PgadLoad *pgad_load_take(uint64 id);

/* keys.c: a key column's keys, found in the load's pass */

/*
 * What a key costs against pgad.memory_limit beside its text, which counts twice (pgad_keys_cost: the buffer
 * grows by doubling): its end in the buffer and its code's slots in the hash (at most half full, so up to four
 * slots a key after a doubling), with room to grow.
 */
#define PGAD_KEY_BYTES	64

typedef struct PgadKeyHash PgadKeyHash;

extern PgadKeyHash *pgad_keys_create(MemoryContext keep, MemoryContext work);
extern int64 pgad_keys_cost(int len);
extern int64 pgad_keys_count(const PgadKeyHash *keys);
extern int64 pgad_keys_find(const PgadKeyHash *keys, const char *text, int len);
extern int64 pgad_keys_add(PgadKeyHash *keys, const char *text, int len);
extern void pgad_keys_give(PgadKeyHash *keys, PgadKeys *into);

/* reads.c: the relations a training read */

extern void pgad_reads_init(void);

extern PGDLLEXPORT void pgad_reads_begin(void);
extern PGDLLEXPORT void pgad_reads_end(void);
extern PGDLLEXPORT int pgad_reads(Oid *oids, int size);

#endif							/* PGAD_H */
