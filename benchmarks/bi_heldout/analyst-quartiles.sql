-- tool: analyst, psql
-- chart: summary statistics
-- why: three percentiles in one statement
-- expect: answered
SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY income) AS q1,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY income) AS median,
       percentile_cont(0.75) WITHIN GROUP (ORDER BY income) AS q3
FROM people
