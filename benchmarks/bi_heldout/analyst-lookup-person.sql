-- tool: analyst, psql
-- chart: lookup
-- why: one person's income: must be refused
-- expect: refused 42501
SELECT income FROM people WHERE person_id = 4711
