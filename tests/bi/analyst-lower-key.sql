-- tool: analyst SQL (psql), a text key folded to lower case
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's visits.department
-- expect: answered
SELECT LOWER(department) AS dept, COUNT(*) AS n FROM visits GROUP BY 1 ORDER BY 1
