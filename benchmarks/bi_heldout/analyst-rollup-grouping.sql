-- tool: analyst, psql
-- chart: subtotals
-- keys: 1,2,3
-- why: ROLLUP over department and year with GROUPING()
-- expect: answered
SELECT department, EXTRACT(YEAR FROM visited_at) AS yr, GROUPING(department, EXTRACT(YEAR FROM visited_at)) AS g, SUM(cost) AS total
FROM visits
GROUP BY ROLLUP (department, EXTRACT(YEAR FROM visited_at))
