-- tool: Grafana, time series panel: $__timeGroupAlias(visited_at, 30d), MAX(days)
-- chart: time series
-- keys: 1
-- why: MAX per 30-day epoch bucket
-- expect: answered
SELECT
  floor(extract(epoch from visited_at)/2592000)*2592000 AS "time",
  max(days) AS "max days"
FROM visits
GROUP BY 1
ORDER BY 1
