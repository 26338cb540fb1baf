-- tool: analyst, psql
-- chart: shares
-- keys: 1
-- why: percent of total with SUM(COUNT(*)) OVER ()
-- expect: answered
SELECT region, COUNT(*) AS n, 100.0 * COUNT(*) / SUM(COUNT(*)) OVER () AS pct FROM people GROUP BY region ORDER BY n DESC
