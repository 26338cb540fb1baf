-- tool: analyst, psql
-- chart: bands
-- keys: 1
-- why: a CASE key with ELSE, COUNT and AVG
-- expect: answered
SELECT CASE WHEN cost < 100 THEN 'low' WHEN cost < 1000 THEN 'medium' ELSE 'high' END AS band,
       COUNT(*) AS visits, AVG(days) AS avg_days
FROM visits GROUP BY 1 ORDER BY 2 DESC
