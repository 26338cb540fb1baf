-- tool: Apache Superset 6.1.0, Line Chart on the dataset public.visits: x-axis visited_at with
--   time grain 5 minute, metric count, time range 2024-03-01 to 2024-03-02
-- source: Superset 6.1.0's PostgreSQL time grain FIVE_MINUTES (db_engine_specs/postgres.py,
--   its _time_grain_expressions), in the statement its Line Chart sends
--   (superset-time-series.sql); refused until the BI probe of 2026-11-29
-- expect: answered
SELECT DATE_TRUNC('hour', visited_at) + INTERVAL '5 minutes' * FLOOR(EXTRACT(MINUTE FROM visited_at) / 5) AS visited_at, COUNT(*) AS count 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-03-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-03-02 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('hour', visited_at) + INTERVAL '5 minutes' * FLOOR(EXTRACT(MINUTE FROM visited_at) / 5) ORDER BY count DESC 
 LIMIT 10000;
