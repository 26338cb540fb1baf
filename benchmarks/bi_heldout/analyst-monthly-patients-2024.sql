-- tool: analyst, psql
-- chart: time series
-- keys: 1
-- why: month as ::date, distinct units, a string date range
-- expect: answered
SELECT date_trunc('month', visited_at)::date AS month, COUNT(DISTINCT person_id) AS patients
FROM visits WHERE visited_at >= '2024-01-01' AND visited_at < '2025-01-01'
GROUP BY 1 ORDER BY 1
