-- tool: Superset, pie chart: SUM(cost) by department
-- chart: pie chart
-- keys: 1
-- why: a SUM per key ordered by the metric
-- expect: answered
SELECT department AS department, SUM(cost) AS "SUM(cost)" 
FROM public.visits GROUP BY department ORDER BY "SUM(cost)" DESC 
 LIMIT 100;
