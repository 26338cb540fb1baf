-- tool: Grafana, table panel (format: table) listing visits in the range
-- chart: table (raw)
-- why: raw rows with timestamps: must be refused
-- expect: refused 42501
SELECT
  visited_at AS "time",
  department,
  cost
FROM visits
WHERE visited_at BETWEEN '2024-12-01T00:00:00Z' AND '2024-12-31T23:59:59Z'
ORDER BY 1
