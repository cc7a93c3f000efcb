-- pgad 0.17.0 → 0.18.0: trust, fourth round (issue 45). One source of the install script (extension/sql/pgad.sql):
-- tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.18.0'" to load this file. \quit

-- §read_from (issue 45): read_from records the relations the call read as the executor checked them
-- (extension/pgad.c, part 7): a view, not what it reads as its owner.
COMMENT ON COLUMN pgad.model_versions.read_from IS
    'the relations the training read as PostgreSQL checked them (a view, not what it reads as its owner; what a '
    'function reads); NULL: not recorded (before 0.13.0)';
