-- tool: analyst SQL (psql), each group's share of the total with a window over the groups
-- source: issue 33 ("SUM(COUNT(*)) OVER () for shares")
-- identifiers: the demo's visits.department
-- expect: answered
SELECT department, COUNT(*) AS visits, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct FROM visits GROUP BY department ORDER BY visits DESC
