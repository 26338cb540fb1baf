-- tool: analyst, psql
-- chart: month over month
-- keys: 1
-- why: LAG over released monthly counts in a subquery
-- expect: answered
SELECT month, visits, visits - LAG(visits) OVER (ORDER BY month) AS change
FROM (SELECT date_trunc('month', visited_at) AS month, COUNT(*) AS visits FROM visits GROUP BY 1) m
ORDER BY month
