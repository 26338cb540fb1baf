-- tool: Superset 6, bar chart with the metric COUNT_DISTINCT(cost) per department (its metric picker's default aggregates)
-- source: Superset's SQLAlchemy compile of a simple COUNT_DISTINCT metric, as the Superset test sends it
-- identifiers: the demo's visits.department and cost
-- expect: answered
SELECT department AS department, COUNT(DISTINCT cost) AS "COUNT_DISTINCT(cost)" 
FROM public.visits GROUP BY department ORDER BY "COUNT_DISTINCT(cost)" DESC 
 LIMIT 10000
