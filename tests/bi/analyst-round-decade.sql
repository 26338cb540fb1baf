-- tool: analyst SQL (psql), ROUND(age, -1) as a decade
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.age
-- expect: answered
SELECT ROUND(age, -1) AS decade, COUNT(*) AS n FROM people GROUP BY 1 ORDER BY 1
