/*
 * keys.c: a key column's keys, found in the native load's own pass (issue 48): a hash of each key's text to its
 * code, 1, 2, … in the order the rows first show them, which load.c's receiver looks every row's key up in and
 * appends as the row's value of the column, as it appends a number. A keyed weight (pgad/keyed.py) holds a value per
 * key; before this, its keys were read by a query of their own (categorical.LEVELS) and each row coded by a jsonb
 * literal of them all in the loader's query, one of about 20 MB for a million keys, over a second scan of the data.
 *
 * The hash is open addressing with linear probing over a power-of-two array of codes (0: an empty slot), at most
 * half full, keyed by the bytes of the key's text (common/hashfn.h's hash_bytes_extended). A key's text is kept once,
 * in one buffer of every key in code order, each followed by a NUL (text holds no NUL): that buffer is what Python
 * reads, with one decode and one split, once the load is done. The codes' places and the buffer's ends, which only
 * the lookups need, are in a context of their own that the load frees when its query ends (load.c: the work context);
 * the buffer is in the load's keys context, which lives until Python is done with the load (pgad_load_done) and is
 * freed with it, or at once when the load fails. Arrays past 1 GB are allocated as huge ones (MCXT_ALLOC_HUGE).
 *
 * What a key costs (pgad_keys_cost) counts against pgad.memory_limit with the load's rows; load.c checks it before a
 * key is added and stops the load with the keys' error (53200). A column has at most PG_INT32_MAX keys (54000 past
 * them), far more than the limit allows at its default. Growing the hash checks for interrupts as it moves the codes.
 * The keys are given to Python as UTF-8 (pgad_keys_give): in the server's encoding when that is UTF-8 or SQL_ASCII,
 * else converted key by key.
 */
#include "postgres.h"

#include <string.h>

#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "pgad.h"

#define KEYS_FIRST_SLOTS 1024				/* the hash's first array of codes */
#define KEYS_FIRST_BYTES ((Size) 64 * 1024)	/* the text buffer's first size */
#define KEYS_MOST PG_INT32_MAX				/* the most keys a column takes */
#define KEYS_CHECK_EVERY 65536				/* codes moved between checks for interrupts when the hash grows */

struct PgadKeyHash
{
	MemoryContext keep;			/* the text's context: the load's keys context, until Python is done */
	MemoryContext work;			/* the lookups' context: slots and ends, freed when the query ends */
	char	   *text;			/* every key's text in code order, each followed by a NUL */
	Size		used;			/* bytes of text used */
	Size		size;			/* bytes of text allocated */
	uint64	   *ends;			/* ends[code - 1]: the offset in text just past the key's NUL */
	Size		ends_size;		/* entries of ends allocated */
	uint32	   *slots;			/* the hash: 0 for an empty slot, else a key's code */
	Size		mask;			/* slots' count less one (a power of two less one) */
	int64		count;			/* keys, codes 1 … count */
};

/* What one key of len bytes costs against pgad.memory_limit: pgad.h's PGAD_KEY_BYTES says what it counts. */
int64
pgad_keys_cost(int len)
{
	return 2 * ((int64) len + 1) + PGAD_KEY_BYTES;
}

/* A new, empty hash: its text in keep, its lookups in work. */
PgadKeyHash *
pgad_keys_create(MemoryContext keep, MemoryContext work)
{
	PgadKeyHash *keys = MemoryContextAllocZero(work, sizeof(PgadKeyHash));

	keys->keep = keep;
	keys->work = work;
	keys->size = KEYS_FIRST_BYTES;
	keys->text = MemoryContextAlloc(keep, keys->size);
	keys->ends_size = KEYS_FIRST_SLOTS / 2;
	keys->ends = MemoryContextAlloc(work, sizeof(uint64) * keys->ends_size);
	keys->mask = KEYS_FIRST_SLOTS - 1;
	keys->slots = MemoryContextAllocZero(work, sizeof(uint32) * KEYS_FIRST_SLOTS);
	return keys;
}

int64
pgad_keys_count(const PgadKeyHash *keys)
{
	return keys->count;
}

static inline uint64
keys_hash(const char *text, int len)
{
	return hash_bytes_extended((const unsigned char *) text, len, 0);
}

/* The offset of code's text in keys->text, and its length (without the NUL). */
static inline Size
keys_start(const PgadKeyHash *keys, int64 code, Size *len)
{
	Size		start = code == 1 ? 0 : keys->ends[code - 2];

	*len = keys->ends[code - 1] - start - 1;
	return start;
}

/* The slot where text is, or the empty one where it would go. */
static inline Size
keys_slot(const PgadKeyHash *keys, const char *text, int len)
{
	Size		slot = keys_hash(text, len) & keys->mask;

	for (;;)
	{
		uint32		code = keys->slots[slot];
		Size		found;
		Size		start;

		if (code == 0)
			return slot;
		start = keys_start(keys, code, &found);
		if (found == (Size) len && memcmp(keys->text + start, text, len) == 0)
			return slot;
		slot = (slot + 1) & keys->mask;
	}
}

/* The code of the key text (len bytes), or 0 when it is not one yet. */
int64
pgad_keys_find(const PgadKeyHash *keys, const char *text, int len)
{
	return keys->slots[keys_slot(keys, text, len)];
}

/* The hash twice as large, every code moved to its slot there. */
static void
keys_grow_slots(PgadKeyHash *keys)
{
	Size		count = (keys->mask + 1) * 2;
	uint32	   *slots = MemoryContextAllocExtended(keys->work, sizeof(uint32) * count,
												   MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	int64		code;

	for (code = 1; code <= keys->count; code++)
	{
		Size		len;
		Size		start = keys_start(keys, code, &len);
		Size		slot = keys_hash(keys->text + start, (int) len) & (count - 1);

		while (slots[slot] != 0)
			slot = (slot + 1) & (count - 1);
		slots[slot] = (uint32) code;
		if (code % KEYS_CHECK_EVERY == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pfree(keys->slots);
	keys->slots = slots;
	keys->mask = count - 1;
}

/*
 * The new key text (len bytes; not a key yet: pgad_keys_find gave 0) added with the next code, which it returns.
 * The caller has charged its cost.
 */
int64
pgad_keys_add(PgadKeyHash *keys, const char *text, int len)
{
	int64		code;

	if (keys->count >= KEYS_MOST)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a key column has more than %d keys, the most pgad loads", KEYS_MOST),
				 errhint("Group rare keys into one in the data query.")));
	if ((Size) (keys->count + 1) * 2 > keys->mask + 1)
		keys_grow_slots(keys);
	if (keys->used + len + 1 > keys->size)
	{
		Size		size = keys->size;

		while (keys->used + len + 1 > size)
			size *= 2;
		keys->text = repalloc_huge(keys->text, size);
		keys->size = size;
	}
	if ((Size) keys->count == keys->ends_size)
	{
		keys->ends = repalloc_huge(keys->ends, sizeof(uint64) * keys->ends_size * 2);
		keys->ends_size *= 2;
	}
	memcpy(keys->text + keys->used, text, len);
	keys->text[keys->used + len] = '\0';
	keys->used += len + 1;
	code = ++keys->count;
	keys->ends[code - 1] = keys->used;
	keys->slots[keys_slot(keys, text, len)] = (uint32) code;
	return code;
}

/*
 * The keys as Python reads them (into): their count and their text, UTF-8, each key followed by a NUL, in code
 * order, in the keys' keep context (converted there from the server's encoding where that is another than UTF-8 or
 * SQL_ASCII). Called before the work context goes.
 */
void
pgad_keys_give(PgadKeyHash *keys, PgadKeys *into)
{
	int			encoding = GetDatabaseEncoding();
	int64		code;
	char	   *text;
	Size		used = 0;
	Size		size;

	into->count = keys->count;
	if (encoding == PG_UTF8 || encoding == PG_SQL_ASCII)
	{
		into->bytes = keys->used;
		into->text = keys->text;
		return;
	}
	size = Max(keys->used, 1);
	text = MemoryContextAllocExtended(keys->keep, size, MCXT_ALLOC_HUGE);
	for (code = 1; code <= keys->count; code++)
	{
		Size		len;
		Size		start = keys_start(keys, code, &len);
		char	   *converted = pg_server_to_any(keys->text + start, (int) len, PG_UTF8);
		Size		converted_len = strlen(converted);

		while (used + converted_len + 1 > size)
		{
			size *= 2;
			text = repalloc_huge(text, size);
		}
		memcpy(text + used, converted, converted_len + 1);
		used += converted_len + 1;
		if (converted != keys->text + start)
			pfree(converted);
		if (code % KEYS_CHECK_EVERY == 0)
			CHECK_FOR_INTERRUPTS();
	}
	pfree(keys->text);
	keys->text = NULL;
	into->bytes = used;
	into->text = text;
}
