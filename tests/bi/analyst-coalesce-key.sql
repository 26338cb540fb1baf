-- tool: analyst SQL (psql), COALESCE(key, 'unknown')
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.region
-- expect: answered
SELECT COALESCE(region, 'unknown') AS r, COUNT(*) AS n FROM people GROUP BY 1 ORDER BY 1
