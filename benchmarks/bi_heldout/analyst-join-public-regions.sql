-- tool: analyst, psql
-- chart: lookup join
-- keys: 1
-- why: a many-to-one join to the public regions table
-- expect: answered
SELECT r.name, COUNT(*) AS n, AVG(p.age) AS avg_age FROM people p JOIN regions r ON p.region = r.code GROUP BY r.name ORDER BY r.name
