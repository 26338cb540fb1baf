-- tool: analyst SQL (psql), two tables' counts in one answer
-- source: issue 33 / the BI probe of 2026-11-28 (UNION ALL of releases)
-- identifiers: the demo's people and visits
-- expect: answered
SELECT 'people' AS t, COUNT(*) AS n FROM people UNION ALL SELECT 'visits', COUNT(*) FROM visits
