-- tool: analyst SQL (psql), cost per day of stay: a division by a column whose declared
--   domain keeps the divisor from 0 (days in [0, 60], so days + 1 in [1, 61])
-- source: issue 33 ("AVG(cost / (days + 1)) with days >= 0: refused as can fail in the backend")
-- identifiers: the demo's visits.cost, days and department
-- expect: answered
SELECT department, AVG(cost / (days + 1)) AS cost_per_day FROM visits GROUP BY department
