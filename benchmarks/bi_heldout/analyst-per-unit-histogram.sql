-- tool: analyst, psql
-- chart: histogram
-- keys: 1
-- why: people by their number of visits (keys 1..max_rows_per_unit)
-- expect: answered
SELECT n_visits, COUNT(*) AS people
FROM (SELECT person_id, COUNT(*) AS n_visits FROM visits GROUP BY person_id) t
GROUP BY n_visits ORDER BY n_visits
