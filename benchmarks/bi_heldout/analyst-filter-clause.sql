-- tool: analyst, psql
-- chart: summary statistics
-- why: aggregate FILTER clauses
-- expect: answered
SELECT COUNT(*) FILTER (WHERE age >= 65) AS seniors,
       COUNT(*) FILTER (WHERE age < 30) AS young,
       AVG(income) FILTER (WHERE sex = 'f') AS avg_income_f
FROM people
