-- tool: analyst, psql
-- chart: list
-- why: raw incomes of the oldest people: must be refused
-- expect: refused 42501
SELECT array_agg(income) FROM people WHERE age > 95
