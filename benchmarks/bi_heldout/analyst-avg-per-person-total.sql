-- tool: analyst, psql
-- chart: per-unit total
-- why: AVG of per-person SUMs
-- expect: answered
SELECT AVG(total) AS avg_spend FROM (SELECT person_id, SUM(cost) AS total FROM visits GROUP BY person_id) t
