-- tool: analyst, psql
-- chart: ratio
-- keys: 1
-- why: division by days + 1, whose domain excludes 0
-- expect: answered
SELECT department, AVG(cost / (days + 1)) AS cost_per_day FROM visits GROUP BY 1
