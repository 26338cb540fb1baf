-- tool: analyst SQL (psql), LEAST(days, 10): ten days and more in one group
-- source: the BI probe of 2026-11-28 (derived keys)
-- identifiers: the demo's visits.days
-- expect: answered
SELECT LEAST(days, 10) AS d, COUNT(*) AS n FROM visits GROUP BY 1 ORDER BY 1
