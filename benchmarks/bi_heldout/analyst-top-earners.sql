-- tool: analyst, psql
-- chart: top rows
-- why: the ten highest incomes with ids: must be refused
-- expect: refused 42501
SELECT person_id, income FROM people ORDER BY income DESC LIMIT 10
