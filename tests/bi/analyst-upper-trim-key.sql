-- tool: analyst SQL (psql), UPPER(TRIM()) of a key, grouped by the expression
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.region and income
-- expect: answered
SELECT UPPER(TRIM(region)) AS r, AVG(income) AS avg_income FROM people GROUP BY UPPER(TRIM(region)) ORDER BY 1
