-- tool: Apache Superset 6.1.0, Line Chart on the dataset public.visits: x-axis visited_at with
--   time grain Second, metric count, time range 2024-03-01 10:00 to 11:00
-- source: Superset 6.1.0's PostgreSQL time grain SECOND (db_engine_specs/postgres.py, its
--   _time_grain_expressions: DATE_TRUNC('second', {col})), in the statement its Line Chart sends
--   (superset-time-series.sql); refused until 2026-11-29 ("date_trunc takes one of … got second")
-- expect: answered
SELECT DATE_TRUNC('second', visited_at) AS visited_at, COUNT(*) AS count 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-03-01 10:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-03-01 11:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('second', visited_at) ORDER BY count DESC 
 LIMIT 10000;
