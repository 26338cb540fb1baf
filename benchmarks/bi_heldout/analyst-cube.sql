-- tool: analyst, psql
-- chart: cross tab
-- keys: 1,2
-- why: CUBE over two keys
-- expect: answered
SELECT region, sex, COUNT(*) FROM people GROUP BY CUBE (region, sex)
