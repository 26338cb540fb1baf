-- tool: Superset, line chart with dimension department and series limit 3 (by AVG(days)), grain quarter
-- chart: line chart
-- keys: 1,2
-- why: the series-limit join on a top-3 by a noisy AVG
-- expect: answered
SELECT DATE_TRUNC('quarter', visited_at) AS __timestamp, department AS department, AVG(days) AS "AVG(days)" 
FROM public.visits JOIN (SELECT department AS department__, AVG(days) AS mme_inner__ 
FROM public.visits GROUP BY department ORDER BY mme_inner__ DESC 
 LIMIT 3) AS anon_1 ON department = department__ GROUP BY DATE_TRUNC('quarter', visited_at), department 
 LIMIT 10000;
