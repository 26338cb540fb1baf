-- tool: analyst, psql
-- chart: list
-- why: a list of raw values: must be refused
-- expect: refused 42501
SELECT region, string_agg(sex, ',') FROM people GROUP BY region
