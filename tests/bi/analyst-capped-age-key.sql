-- tool: analyst SQL (psql), ages above 90 capped in a CASE whose ELSE is the column
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.age
-- expect: answered
SELECT CASE WHEN age > 90 THEN 90 ELSE age END AS age_capped, COUNT(*) AS n FROM people WHERE age >= 80 GROUP BY 1 ORDER BY 1
