-- tool: Superset, table chart (aggregate mode): COUNT, AVG(income), MAX(age) by region, sex
-- chart: table
-- keys: 1,2
-- why: three aggregates over two keys
-- expect: answered
SELECT region AS region, sex AS sex, COUNT(*) AS count, AVG(income) AS "AVG(income)", MAX(age) AS "MAX(age)" 
FROM public.people GROUP BY region, sex ORDER BY count DESC 
 LIMIT 10000;
