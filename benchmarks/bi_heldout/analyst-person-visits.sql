-- tool: analyst, psql
-- chart: lookup
-- why: one person's visits: must be refused
-- expect: refused 42501
SELECT * FROM visits WHERE person_id = 17
