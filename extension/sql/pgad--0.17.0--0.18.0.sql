-- pgad 0.17.0 → 0.18.0: trust, fourth round (issue 45). One source of the install script (extension/sql/pgad.sql):
-- tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.18.0'" to load this file. \quit
