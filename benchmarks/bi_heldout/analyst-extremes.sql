-- tool: analyst, psql
-- chart: summary statistics
-- why: MAX, MIN and a difference of two released values
-- expect: answered
SELECT MAX(income) AS max_income, MIN(income) AS min_income, MAX(age) - MIN(age) AS age_range FROM people
