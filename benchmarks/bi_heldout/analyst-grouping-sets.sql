-- tool: analyst, psql
-- chart: subtotals
-- keys: 1,2
-- why: GROUPING SETS with a grand total
-- expect: answered
SELECT region, sex, COUNT(*) AS n, AVG(age) AS avg_age FROM people GROUP BY GROUPING SETS ((region, sex), (region), ()) ORDER BY 1, 2
