-- tool: Grafana, time series panel: $__timeGroupAlias(visited_at, 1d), distinct patients, December 2024
-- chart: time series
-- keys: 1
-- why: COUNT(DISTINCT unit) per day
-- expect: answered
SELECT
  floor(extract(epoch from visited_at)/86400)*86400 AS "time",
  count(DISTINCT person_id) AS "patients"
FROM visits
WHERE visited_at BETWEEN '2024-12-01T00:00:00Z' AND '2024-12-31T23:59:59Z'
GROUP BY 1
ORDER BY 1
