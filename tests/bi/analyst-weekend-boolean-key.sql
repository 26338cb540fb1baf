-- tool: analyst SQL (psql), a condition as the GROUP BY key (false, true)
-- source: issue 33 item 2
-- identifiers: the demo's visits.visited_at, visits.cost
-- expect: answered
SELECT EXTRACT(ISODOW FROM visited_at) IN (6, 7) AS weekend, AVG(cost) AS avg_cost FROM visits GROUP BY 1 ORDER BY 1
