-- tool: analyst SQL (psql), two grouped counts stacked with a label column
-- source: issue 33 / the BI probe of 2026-11-28 (UNION ALL of releases)
-- identifiers: the demo's people.sex and region
-- expect: answered
SELECT 'f' AS sex, region, COUNT(*) AS n FROM people WHERE sex = 'f' GROUP BY region UNION ALL SELECT 'm', region, COUNT(*) FROM people WHERE sex = 'm' GROUP BY region
