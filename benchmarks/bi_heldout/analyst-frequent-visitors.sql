-- tool: analyst, psql
-- chart: per-person groups
-- why: person ids of frequent visitors: must be refused
-- expect: refused 42501
SELECT person_id, COUNT(*) FROM visits GROUP BY person_id HAVING COUNT(*) >= 6
