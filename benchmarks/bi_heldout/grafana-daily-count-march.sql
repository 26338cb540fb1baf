-- tool: Grafana, time series panel: $__timeGroupAlias(visited_at, 1d) with $__timeFilter over March 2024
-- chart: time series
-- keys: 1
-- why: the macro's epoch-floor bucket (86400 s)
-- expect: answered
SELECT
  floor(extract(epoch from visited_at)/86400)*86400 AS "time",
  count(*) AS "visits"
FROM visits
WHERE visited_at BETWEEN '2024-03-01T00:00:00Z' AND '2024-03-31T23:59:59Z'
GROUP BY 1
ORDER BY 1
