-- tool: analyst SQL (psql), two keys concatenated into one segment
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's people.region and sex
-- expect: answered
SELECT region || '/' || sex AS segment, COUNT(*) AS n FROM people GROUP BY 1 ORDER BY 1
