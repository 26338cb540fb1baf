-- tool: Superset, histogram chart on age (raw column values, binned in the browser)
-- chart: histogram
-- why: raw values of a column: must be refused
-- expect: refused 42501
SELECT age AS age 
FROM public.people 
 LIMIT 10000;
