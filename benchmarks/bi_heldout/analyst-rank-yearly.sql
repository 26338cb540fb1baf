-- tool: analyst, psql
-- chart: ranking
-- keys: 1,2
-- why: RANK() over released yearly sums in a CTE
-- expect: answered
WITH yearly AS (
  SELECT EXTRACT(YEAR FROM visited_at) AS yr, department, SUM(cost) AS total
  FROM visits GROUP BY 1, 2
)
SELECT yr, department, total, RANK() OVER (PARTITION BY yr ORDER BY total DESC) AS rnk
FROM yearly ORDER BY yr, rnk
