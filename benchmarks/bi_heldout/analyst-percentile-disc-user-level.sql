-- tool: analyst, psql
-- chart: summary statistics
-- keys: 1
-- why: a user-level percentile_disc per department
-- expect: answered
SELECT department, percentile_disc(0.5) WITHIN GROUP (ORDER BY cost) AS median_cost FROM visits GROUP BY department
