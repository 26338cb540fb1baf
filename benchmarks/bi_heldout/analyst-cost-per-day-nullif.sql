-- tool: analyst, psql
-- chart: ratio
-- keys: 1
-- why: a ratio of two SUMs with NULLIF
-- expect: answered
SELECT department, SUM(cost) / NULLIF(SUM(days), 0) AS cost_per_day FROM visits GROUP BY department ORDER BY department
