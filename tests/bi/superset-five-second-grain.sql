-- tool: Apache Superset 6.1.0, Line Chart on the dataset public.visits: x-axis visited_at with
--   time grain 5 second, metric count, time range 2024-03-01 10:00 to 11:00
-- source: Superset 6.1.0's PostgreSQL time grain FIVE_SECONDS (db_engine_specs/postgres.py, its
--   _time_grain_expressions), in the statement its Line Chart sends (superset-time-series.sql);
--   refused until 2026-11-29
-- expect: answered
SELECT DATE_TRUNC('minute', visited_at) + INTERVAL '5 seconds' * FLOOR(EXTRACT(SECOND FROM visited_at) / 5) AS visited_at, COUNT(*) AS count 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-03-01 10:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-03-01 11:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('minute', visited_at) + INTERVAL '5 seconds' * FLOOR(EXTRACT(SECOND FROM visited_at) / 5) ORDER BY count DESC 
 LIMIT 10000;
