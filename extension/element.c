/*
 * element.c: pgad._element, which pgad.pack's queries (pack.c) read an array column's elements with, checking every
 * array against the length the lambda reads; and the error for an array of another shape (pgad_odd_array), which the
 * native load (load.c) gives too.
 *
 * The element readers that pgad.pack's queries use in place of a subscript. The loader's query reads element k of an
 * array column as pgad._element(pgad_data.pixels, k, length, 'pixels') (pgad/loader.py), not as (pgad_data.pixels)[k]:
 * the data query may give other rows than when loader.lengths measured its arrays (random(), a sequence, a function),
 * and a subscript reads whatever array the row has, the wrong element of one that starts at index 0, the first elements
 * of a longer one, NULL (the row skipped) past the end of a shorter one and in a 2-D or empty one. So every array is
 * checked, in C, on the row that is read, as the native load checks it (load.c): one dimension, from index 1, of the
 * length the lambda reads; else SQLSTATE 2202E with the native load's message, naming the column but not the row, which
 * no call here can count (parallel workers, hashed chunks and groups see the rows in other orders).
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "pgad.h"

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

/*
 * The error for an array of column name that is not one-dimensional from index 1 of width elements, the length the
 * lambda reads: as loader.lengths words it, since it may be the first to see the row; row is its place (1-based, in
 * the data's order), or 0 where the caller cannot know it ("a row").
 */
void
pgad_odd_array(const char *name, int64 row, ArrayType *array, int width)
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
 * column name in one row, where v is one-dimensional from index 1 of length elements; else the error (pgad_odd_array).
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
		pgad_odd_array(text_to_cstring(PG_GETARG_TEXT_PP(3)), 0, array, length);
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
