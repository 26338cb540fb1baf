-- tool: analyst, psql
-- chart: summary statistics
-- keys: 1
-- why: STDDEV and VARIANCE per key
-- expect: answered
SELECT sex, STDDEV(income) AS sd_income, VARIANCE(age) AS var_age FROM people GROUP BY sex
