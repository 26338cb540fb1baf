-- tool: analyst SQL (psql), months as text and the year as an integer
-- source: issue 33 (TO_CHAR(ts, 'YYYY-MM'), CAST(EXTRACT(YEAR FROM ts) AS INTEGER))
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT TO_CHAR(visited_at, 'YYYY-MM') AS month, CAST(EXTRACT(YEAR FROM visited_at) AS INTEGER) AS year, COUNT(*) FROM visits GROUP BY 1, 2 ORDER BY 1
