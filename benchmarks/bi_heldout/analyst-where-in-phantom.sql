-- tool: analyst, psql
-- chart: filtered groups
-- keys: 1
-- why: a WHERE on 2 of 5 department keys with SUM and AVG
-- expect: answered
SELECT department, SUM(cost) AS total, AVG(cost) AS mean FROM visits WHERE department IN ('cardiology', 'oncology') GROUP BY department
