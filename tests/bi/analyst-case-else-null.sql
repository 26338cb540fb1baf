-- tool: analyst SQL (psql), a CASE key whose other rows form the NULL group
-- source: issue 33 ("CASE … ELSE NULL keys")
-- identifiers: the demo's people.age
-- expect: answered
SELECT CASE WHEN age < 30 THEN 'under 30' WHEN age >= 65 THEN '65+' ELSE NULL END AS band, age % 2 AS parity, COUNT(*) FROM people GROUP BY 1, 2
