-- tool: analyst SQL (psql), each department's share of all visits through a scalar subquery
-- source: issue 33 (post-processing of released values); the lead's BI probe of 2026-11-29
-- identifiers: the demo's visits.department
-- expect: answered
SELECT department, ROUND(COUNT(*) * 100.0 / (SELECT COUNT(*) FROM visits), 1) AS pct_of_visits FROM visits GROUP BY department ORDER BY pct_of_visits DESC
