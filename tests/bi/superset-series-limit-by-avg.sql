-- tool: Apache Superset, line chart on public.visits: metric AVG(cost), dimension department,
--   series limit 2 ranked by AVG(cost), time grain month (the form Superset builds, as in
--   superset-series-limit.sql, with an AVG metric)
-- source: issue 33 (the series limit ranked by a metric whose series total no release holds)
-- identifiers: the demo's visits.visited_at, department, cost
-- expect: answered
SELECT DATE_TRUNC('month', visited_at) AS __timestamp, department AS department, AVG(cost) AS "AVG(cost)" 
FROM public.visits JOIN (SELECT department AS department__, AVG(cost) AS mme_inner__ 
FROM public.visits GROUP BY department ORDER BY mme_inner__ DESC 
 LIMIT 2) AS series_limit ON department = department__ GROUP BY DATE_TRUNC('month', visited_at), department 
 LIMIT 10000;
