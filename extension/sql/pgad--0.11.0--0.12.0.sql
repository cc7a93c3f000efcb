-- pgad 0.11.0 → 0.12.0: every core, one copy (issue 29). Nothing in the catalog changes: the native load, the
-- threads and their settings (pgad.threads, pgad.max_threads) are pgad.so's and pgad's Python's; this script only
-- moves the version, so that extversion says which pgad.so and Python a database expects.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.12.0'" to load this file. \quit
