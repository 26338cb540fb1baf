-- tool: Grafana, stat panel over the dashboard range (second half of 2023)
-- chart: stat
-- why: one AVG under a time filter
-- expect: answered
SELECT
  avg(days)
FROM visits
WHERE visited_at BETWEEN '2023-07-01T00:00:00Z' AND '2023-12-31T23:59:59Z'
