-- tool: analyst SQL (psql), a correlation and a least-squares line per key
-- source: issue 33 (CORR, REGR_SLOPE and REGR_INTERCEPT from noisy centred moments)
-- identifiers: the demo's people.sex, age and income
-- expect: answered
SELECT sex, CORR(income, age) AS r, REGR_SLOPE(income, age) AS slope, REGR_INTERCEPT(income, age) AS intercept FROM people GROUP BY sex ORDER BY sex
