-- tool: analyst SQL (psql), weekend or weekday: EXTRACT in a CASE condition
-- source: issue 33 item 1 (the field of the moment clamped to the declared domain)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT CASE WHEN EXTRACT(DOW FROM visited_at) IN (0, 6) THEN 'weekend' ELSE 'weekday' END AS part, COUNT(*) AS n FROM visits GROUP BY 1 ORDER BY 1
