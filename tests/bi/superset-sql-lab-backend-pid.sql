-- tool: Apache Superset 6.1.0, SQL Lab: sent before every statement to learn the id with which
--   to cancel it (superset/db_engine_specs/postgres.py get_cancel_query_id)
-- expect: answered
SELECT pg_backend_pid()
