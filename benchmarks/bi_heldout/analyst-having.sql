-- tool: analyst, psql
-- chart: filtered groups
-- keys: 1
-- why: HAVING on a count far below every true count
-- expect: answered
SELECT department, AVG(days) AS avg_days FROM visits GROUP BY department HAVING COUNT(*) > 5000
