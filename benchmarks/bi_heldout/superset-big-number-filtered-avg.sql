-- tool: Superset, big number: AVG(income) with adhoc filters region IN (north, east) and age >= 30
-- chart: big number
-- why: an AVG under an IN and a range
-- expect: answered
SELECT AVG(income) AS "AVG(income)" 
FROM public.people 
WHERE region IN ('north', 'east') AND age >= 30 
 LIMIT 50000;
