-- tool: Grafana, bar gauge: metric/value columns over the whole range
-- chart: bar gauge
-- keys: 1
-- why: a COUNT per department ordered by the value
-- expect: answered
SELECT
  department AS metric,
  count(*) AS value
FROM visits
WHERE visited_at BETWEEN '2023-01-01T00:00:00Z' AND '2024-12-31T23:59:59Z'
GROUP BY department
ORDER BY value DESC
