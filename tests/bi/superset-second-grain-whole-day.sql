-- tool: Apache Superset 6.1.0, Line Chart on the dataset public.visits: x-axis visited_at with
--   time grain Second, metric count, time range 2024-03-01 to 2024-03-02
-- source: as superset-second-grain.sql, over a whole day: 86,400 keys, more than the demo's
--   max_groups (10,000); the refusal names the range of visited_at to narrow
-- expect: refused 0A000
SELECT DATE_TRUNC('second', visited_at) AS visited_at, COUNT(*) AS count 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-03-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-03-02 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('second', visited_at) ORDER BY count DESC 
 LIMIT 10000;
