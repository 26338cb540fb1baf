-- tool: Grafana, time series panel with a metric column: $__timeGroupAlias(visited_at, 7d), first half of 2024
-- chart: time series (multi series)
-- keys: 1,2
-- why: a weekly epoch bucket x department, SUM(cost)
-- expect: answered
SELECT
  floor(extract(epoch from visited_at)/604800)*604800 AS "time",
  department AS metric,
  sum(cost) AS "value"
FROM visits
WHERE visited_at BETWEEN '2024-01-01T00:00:00Z' AND '2024-06-30T23:59:59Z'
GROUP BY 1, 2
ORDER BY 1, 2
