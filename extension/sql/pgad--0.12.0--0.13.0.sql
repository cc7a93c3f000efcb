-- pgad 0.12.0 → 0.13.0: trust, third round (issue 34).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.13.0'" to load this file. \quit
