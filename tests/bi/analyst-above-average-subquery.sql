-- tool: analyst SQL (psql), visits costing more than the average visit, per department
-- source: issue 34 (a scalar subquery over a protected table: a release of its own, then
--   its value in its place; TPC-H Q22's shape)
-- identifiers: the demo's visits.department, cost
-- expect: answered
SELECT department, COUNT(*) AS costly FROM visits WHERE cost > (SELECT AVG(cost) FROM visits) GROUP BY department ORDER BY department
