-- tool: Superset, bar chart (time series): custom SQL metric percentile_cont(0.9), grain month, 2023
-- chart: time-series bar chart
-- keys: 1
-- why: a percentile per month
-- expect: answered
SELECT DATE_TRUNC('month', visited_at) AS __timestamp, percentile_cont(0.9) WITHIN GROUP (ORDER BY cost) AS "P90 cost" 
FROM public.visits 
WHERE visited_at >= TO_TIMESTAMP('2023-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visited_at < TO_TIMESTAMP('2024-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') GROUP BY DATE_TRUNC('month', visited_at) 
 LIMIT 50000;
