-- tool: Grafana, code-mode query: monthly p95 of cost
-- chart: time series
-- keys: 1
-- why: a percentile per month bucket written by hand in Grafana
-- expect: answered
SELECT
  date_trunc('month', visited_at) AS "time",
  percentile_cont(0.95) WITHIN GROUP (ORDER BY cost) AS "p95 cost"
FROM visits
WHERE visited_at BETWEEN '2023-01-01T00:00:00Z' AND '2024-12-31T23:59:59Z'
GROUP BY 1
ORDER BY 1
