-- tool: analyst, psql
-- chart: correlation
-- why: CORR over two bounded columns
-- expect: answered
SELECT CORR(age, income) AS r FROM people
