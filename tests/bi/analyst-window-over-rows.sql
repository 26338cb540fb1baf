-- tool: analyst SQL (psql), a running total over the table's rows: a window over protected rows
-- source: issue 33 (post-processing reads released rows only)
-- identifiers: the demo's visits.visited_at and cost
-- expect: refused 0A000
SELECT visited_at, SUM(cost) OVER (ORDER BY visited_at) AS running FROM visits
