-- tool: analyst SQL (psql), EXTRACT inside an aggregate's argument (its domain: the hours 0..23)
-- source: issue 33 item 3
-- identifiers: the demo's visits.department, visits.visited_at
-- expect: answered
SELECT department, AVG(EXTRACT(HOUR FROM visited_at)) AS avg_hour FROM visits GROUP BY 1 ORDER BY 1
