-- tool: Superset, big number with trendline: COUNT_DISTINCT(person_id), grain day, December 2024
-- chart: big number with trendline
-- keys: 1
-- why: distinct units per day
-- expect: answered
SELECT DATE_TRUNC('day', visited_at) AS __timestamp, COUNT(DISTINCT person_id) AS "COUNT_DISTINCT(person_id)" 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-12-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2025-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('day', visited_at) 
 LIMIT 50000;
