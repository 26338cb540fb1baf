-- tool: analyst, psql
-- chart: ratio
-- keys: 1
-- why: COUNT(*) over COUNT(DISTINCT unit), a float cast
-- expect: answered
SELECT department, COUNT(*)::float / COUNT(DISTINCT person_id) AS visits_per_patient FROM visits GROUP BY department
