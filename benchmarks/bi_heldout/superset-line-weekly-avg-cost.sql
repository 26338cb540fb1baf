-- tool: Superset, line chart: AVG(cost), time grain week, Q1 2024
-- chart: line chart
-- keys: 1
-- why: __timestamp from DATE_TRUNC('week') with Superset's TO_TIMESTAMP range
-- expect: answered
SELECT DATE_TRUNC('week', visited_at) AS __timestamp, AVG(cost) AS "AVG(cost)" 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2024-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-04-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('week', visited_at) 
 LIMIT 50000;
