-- tool: analyst, psql
-- chart: report table
-- keys: 1
-- why: ROUND over released AVGs and a CASE indicator mean
-- expect: answered
SELECT region, ROUND(AVG(income)::numeric, 2) AS avg_income,
       ROUND(100.0 * AVG(CASE WHEN sex = 'f' THEN 1 ELSE 0 END), 1) AS pct_female
FROM people GROUP BY region ORDER BY region
