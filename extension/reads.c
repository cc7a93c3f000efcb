/*
 * reads.c: the relations a training read (pgad/models/catalog.py, relations_read). The executor checks the privileges
 * of every query it runs, a function's queries included, against its range table; a relation whose SELECT it checks as
 * the current user (checkAsUser unset) is one this role, or the owner of a SECURITY DEFINER function it runs, read; a
 * view's own relations are checked as the view's owner (unless the view is security_invoker), and the view as the
 * reader: the view is noted, and of its relations those whose row-level security filters what the owner reads (the
 * policies' expressions run as the reader: current_user is the reader's, so the view's rows may be the reader's own).
 * While pgad_reads_begin's recordings are open, each such relation is noted once, whichever subtransaction read it (one
 * rolled back still read it); the notes go at the end of the transaction.
 */
#include "postgres.h"

#include <string.h>

#include "access/xact.h"
#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "utils/memutils.h"
#include "utils/rls.h"

#include "pgad.h"

static ExecutorCheckPerms_hook_type next_check_perms = NULL;

static int	reads_open = 0;		/* the recordings open: trainings, one inside another's data query */
static Oid *reads_noted = NULL; /* the relations noted since the outermost opened, in TopMemoryContext */
static int	reads_count = 0;
static int	reads_capacity = 0;

/* Note relid, once. */
static void
reads_note(Oid relid)
{
	int			k;

	for (k = 0; k < reads_count; k++)
		if (reads_noted[k] == relid)
			return;
	if (reads_count == reads_capacity)
	{
		int			capacity = Max(16, reads_capacity * 2);

		reads_noted = reads_noted == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(Oid) * capacity) :
			repalloc(reads_noted, sizeof(Oid) * capacity);
		reads_capacity = capacity;
	}
	reads_noted[reads_count++] = relid;
}

/* ExecutorCheckPerms_hook: called once the executor's own checks of range_table have passed. */
static bool
reads_checked(List *range_table, bool ereport_on_violation)
{
	ListCell   *l;

	if (reads_open > 0)
		foreach(l, range_table)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, l);

			if (rte->rtekind != RTE_RELATION || !(rte->requiredPerms & ACL_SELECT))
				continue;
			if (!OidIsValid(rte->checkAsUser) ||
				check_enable_rls(rte->relid, rte->checkAsUser, true) == RLS_ENABLED)
				reads_note(rte->relid);
		}
	return next_check_perms == NULL || next_check_perms(range_table, ereport_on_violation);
}

/* Open a recording: the outermost starts with nothing noted. */
void
pgad_reads_begin(void)
{
	if (reads_open++ == 0)
		reads_count = 0;
}

/* Close the innermost recording. */
void
pgad_reads_end(void)
{
	if (reads_open > 0)
		reads_open--;
}

/* The relations noted (at most size of them into oids) and how many there are; -1 when no recording is open. */
int
pgad_reads(Oid *oids, int size)
{
	if (reads_open == 0)
		return -1;
	if (reads_count > 0 && size > 0)
		memcpy(oids, reads_noted, sizeof(Oid) * Min(size, reads_count));
	return reads_count;
}

/* At the end of a transaction no recording is open (one a failed training left open closes here). */
static void
reads_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
	{
		reads_open = 0;
		reads_count = 0;
	}
}

/*
 * From _PG_init: reads_checked sees every range table the executor has checked (ExecutorCheckPerms_hook, calling the
 * hook it takes the place of), and the end of each transaction closes the recordings.
 */
void
pgad_reads_init(void)
{
	next_check_perms = ExecutorCheckPerms_hook;
	ExecutorCheckPerms_hook = reads_checked;
	RegisterXactCallback(reads_xact_callback, NULL);
}
