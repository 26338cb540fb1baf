-- tool: analyst, psql
-- chart: weekday profile
-- keys: 1
-- why: ISODOW as the key
-- expect: answered
SELECT EXTRACT(ISODOW FROM visited_at) AS dow, AVG(cost) AS avg_cost FROM visits GROUP BY 1 ORDER BY 1
